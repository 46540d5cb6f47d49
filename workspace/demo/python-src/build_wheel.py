"""Writes wheels/readingease-1.0.0-py3-none-any.whl from python-src/readingease, byte for byte the same
on every run (fixed timestamps and order), so requirements.txt can pin its hash. Run from anywhere:
python3 workspace/demo/python-src/build_wheel.py; it prints the requirements.txt line.

A wheel is a zip with the package, a METADATA, a WHEEL and a RECORD of every file's hash (the wheel
format: https://packaging.python.org/en/latest/specifications/binary-distribution-format/). It is
written here directly because `pip wheel` needs a build backend (setuptools with `wheel`) that a
machine without a package index may not have."""
import base64
import hashlib
import os
import zipfile

NAME, VERSION = "readingease", "1.0.0"
HERE = os.path.dirname(os.path.abspath(__file__))
INFO = "%s-%s.dist-info" % (NAME, VERSION)
STAMP = (1980, 1, 1, 0, 0, 0)


def members():
    package = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as f:
                yield "%s/%s" % (NAME, name), f.read()
    yield INFO + "/METADATA", (
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Flesch reading ease of English text\n" % (NAME, VERSION)
    ).encode()
    yield INFO + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: arium-demo\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def main():
    path = os.path.join(HERE, "..", "wheels", "%s-%s-py3-none-any.whl" % (NAME, VERSION))
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in list(members()) + [(INFO + "/RECORD", None)]:
            if data is None:
                data = ("\n".join(record + [member + ",,"]) + "\n").encode()
            else:
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append("%s,sha256=%s,%d" % (member, digest, len(data)))
            info = zipfile.ZipInfo(member, STAMP)
            info.compress_type = zipfile.ZIP_STORED  # deflate output may change with zlib's version
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
    with open(path, "rb") as f:
        print("%s==%s --hash=sha256:%s" % (NAME, VERSION, hashlib.sha256(f.read()).hexdigest()))


if __name__ == "__main__":
    main()
