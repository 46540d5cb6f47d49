# A Python tool using a secret by reference: the caller passes {"$secret": "demo-signing-key"} as `key`,
# the engine puts the value in the input (the tool declares secret.read:demo-signing-key and the caller
# is granted it), and scrubs the value from everything that leaves the call: the log line below, which
# prints it by mistake, comes back as "[secret:demo-signing-key]".
import hashlib
import hmac


def run(input, ctx):
    text = ctx.vfs.read(input["path"], encoding="bytes")
    print(f"signing {input['path']} with key {input['key']}")
    digest = hmac.new(input["key"].encode(), text, hashlib.sha256).hexdigest()
    return {"path": input["path"], "hmac_sha256": digest}
