#!/usr/bin/env python3
"""Whether two builds of one CUDA translation unit hold the same kernels: the sm_90 cubin
embedded in each object file (its .nv_fatbin section, read with objcopy; no CUDA tools
needed) compared kernel by kernel: the names, each kernel's machine code (.text.*), and
its shared, constant and local memory sizes. For a change that must not touch the
kernels (a move between files, a new launch argument on the host side).

    python3 bench/same_kernels.py OLD.cu.o NEW.cu.o

Exits 1 where any kernel differs, and names it.
"""
import struct
import subprocess
import sys
import tempfile


def sections(obj):
    with tempfile.NamedTemporaryFile() as fatbin:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, fatbin.name], check=True)
        data = open(fatbin.name, "rb").read()
    start = data.find(b"\x7fELF")
    if start < 0:
        sys.exit(f"{obj}: no uncompressed cubin in .nv_fatbin")
    elf = data[start:]
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    names = headers[shstrndx][4]
    out = {}
    for name, kind, _flags, _addr, offset, size in headers:
        label = elf[names + name:elf.index(b"\0", names + name)].decode()
        out[label] = (elf[offset:offset + size] if kind != 8 else b"", size)  # 8: no bits
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = sections(sys.argv[1]), sections(sys.argv[2])
    status = 0
    for prefix, what in ((".text.", "machine code"), (".nv.shared.", "shared memory"),
                         (".nv.constant0.", "parameters"), (".nv.local.", "local memory")):
        a = {k[len(prefix):]: v for k, v in old.items() if k.startswith(prefix)}
        b = {k[len(prefix):]: v for k, v in new.items() if k.startswith(prefix)}
        for name in sorted(set(a) ^ set(b)):
            print(f"{what}: only in {'old' if name in a else 'new'}: {name}")
            status = 1
        differ = [name for name in set(a) & set(b) if a[name] != b[name]]
        for name in sorted(differ):
            print(f"{what} differs: {name}")
        status |= bool(differ)
        print(f"{what}: {len(set(a) & set(b)) - len(differ)} of {len(a)} kernels the same")
    sys.exit(status)


if __name__ == "__main__":
    main()
