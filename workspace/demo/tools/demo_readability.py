# A Python tool with a dependency: `readingease` is pinned in requirements.txt and installed by
# `arium install` into the project's environment (.arium/python-env), which the runner then uses.
import readingease


def run(input, ctx):
    text = ctx.vfs.read(input["path"])
    result = readingease.reading_ease(text)
    ctx.log(f"{result['words']} words, {result['sentences']} sentences (readingease {readingease.VERSION})")
    return {"path": input["path"], **result}
