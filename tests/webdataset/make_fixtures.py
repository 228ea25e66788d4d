"""Writes WebDataset fixtures for tests/webdataset_test.cpp with Python's tarfile (no other
module): shards in GNU, PAX and ustar formats, tiny grayscale PNGs, .cls labels, .txt bytes and
.npy arrays of varying length, and loose copies of the PNGs in an ImageFolder layout.

    python3 make_fixtures.py OUT_DIR
"""
import io
import os
import struct
import sys
import tarfile
import zlib


def png(width, height, seed):
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 13 + seed * 29) % 256 for x in range(width))
                    for y in range(height))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))

    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def npy(values, descr="<i4"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    fmt = {"<i4": "<%di", "<f4": "<%df"}[descr] % len(values)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(
        fmt, *values)


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data))


def sample_members(i, prefix):
    key = prefix + "%04d" % i
    return [(key + ".png", png(6 + i % 3, 5 + i % 2, i)),
            (key + ".cls", b"%d\n" % (i % 4)),
            (key + ".txt", b"text of sample %d" % i * (1 + i % 3)),
            (key + ".npy", npy(list(range(i, i + 1 + i % 4))))]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    long_dir = "d" * 120 + "/"  # over 100 bytes: a GNU long name, a PAX path, a ustar prefix
    formats = [("gnu.tar", tarfile.GNU_FORMAT), ("pax.tar", tarfile.PAX_FORMAT),
               ("ustar.tar", tarfile.USTAR_FORMAT)]
    i = 0
    for name, fmt in formats:
        with tarfile.open(os.path.join(out, name), "w", format=fmt) as tar:
            add(tar, "README", b"no extension: not a sample")
            for _ in range(4):
                for member, data in sample_members(i, long_dir + "s"):
                    add(tar, member, data)
                    if member.endswith(".png"):
                        folder = os.path.join(out, "folder", "c")
                        os.makedirs(folder, exist_ok=True)
                        with open(os.path.join(folder, "%04d.png" % i), "wb") as f:
                            f.write(data)
                i += 1
    # Faults.
    with tarfile.open(os.path.join(out, "dup.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in sample_members(0, "a") + sample_members(1, "a")[:1]:
            add(tar, member, data)
        add(tar, "a0000.cls", b"3")
    with tarfile.open(os.path.join(out, "apart.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "k1.cls", b"1")
        add(tar, "k2.cls", b"2")
        add(tar, "k1.txt", b"x")
    with tarfile.open(os.path.join(out, "missing.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        for j in range(4):
            add(tar, "m%d.cls" % j, b"%d" % j)
            if j != 2:
                add(tar, "m%d.txt" % j, b"t" * (j + 1))
    with tarfile.open(os.path.join(out, "bigpax.tar"), "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("p0.txt")
        info.size = 3
        info.pax_headers = {"size": "99999999999"}
        tar.addfile(info, io.BytesIO(b"abc"))
    with tarfile.open(os.path.join(out, "f32.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "a.npy", npy([1.5, 2.5], "<f4"))
        add(tar, "b.npy", npy([1, 2], "<i4"))


main()
