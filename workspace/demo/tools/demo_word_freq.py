# A Python tool: each call runs in a fresh process forked by the sandboxed fork server (python/),
# isolated from the host as far as the machine allows (see `arium doctor`).
import re
from collections import Counter


def run(input, ctx):
    words = re.findall(r"[a-z0-9']+", input["text"].lower())
    print(f"{len(words)} words")
    top = Counter(words).most_common(input.get("top", 3))
    return {"words": len(words), "top": [{"word": w, "count": n} for w, n in top]}
