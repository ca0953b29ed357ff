"""Unpacks Debian packages into a folder without dpkg (scripts/setup.sh, SEGTRAIN_OFFLINE on a
machine that has no dpkg-deb): a .deb is an ar archive whose data.tar.{xz,gz} holds the files.

usage: unpack_deb.py PREFIX DEB...
"""
import io
import sys
import tarfile


def refuse(message):
    """Bad input: one line naming the file, exit 2 (nothing unpacked from it)."""
    print(f"unpack_deb: {message}", file=sys.stderr)
    sys.exit(2)


def data_member(path):
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            refuse(f"{path}: not a Debian package (no ar header)")
        while header := f.read(60):
            name = header[:16].decode().strip().rstrip("/")
            try:
                size = int(header[48:58].decode())
            except ValueError:
                refuse(f"{path}: a damaged ar member header")
            body = f.read(size)
            if size % 2:
                f.read(1)
            if name.startswith("data.tar"):
                return body
    refuse(f"{path}: no data.tar member (a truncated package?)")


def main():
    prefix, debs = sys.argv[1], sys.argv[2:]
    for deb in debs:
        try:
            with tarfile.open(fileobj=io.BytesIO(data_member(deb))) as tar:
                tar.extractall(prefix, filter="tar" if hasattr(tarfile, "data_filter") else None)
        except (tarfile.TarError, EOFError, OSError) as e:
            refuse(f"{deb}: its data.tar does not read ({e}; a truncated package?)")


if __name__ == "__main__":
    main()
