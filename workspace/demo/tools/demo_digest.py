# A Python tool on the VFS: SHA-256 of every file under a folder, read through ctx.vfs (each read is
# checked by the engine against the tool's permissions and the caller's grants).
import hashlib


def run(input, ctx):
    root = input.get("path", "/")
    listing = ctx.vfs.list(root, recursive=True)
    files = [e for e in listing["entries"] if e["type"] == "file"]
    digests = {e["path"]: hashlib.sha256(ctx.vfs.read(e["path"], encoding="bytes")).hexdigest() for e in files}
    ctx.log(f"hashed {len(digests)} files under {root}")
    return {"files": len(digests), "sha256": digests}
