# A Python tool: runs in a separate, resource-limited Python process started by the harness in
# python/, isolated from the host where the machine allows it (see `arium doctor`).
import re
from collections import Counter


def run(input, ctx):
    words = re.findall(r"[a-z0-9']+", input["text"].lower())
    top = Counter(words).most_common(input.get("top", 3))
    return {"words": len(words), "top": [{"word": w, "count": n} for w, n in top]}
