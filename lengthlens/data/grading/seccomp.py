"""The seccomp filter the sandbox loads: one process (no fork, vfork, clone3 or memfd), threads allowed; no io_uring
(its requests bypass this filter) and no ptrace."""

from __future__ import annotations

import platform
import struct

from lengthlens.data.grading.limits import SandboxUnavailable

__all__ = ["seccomp_filter"]

# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];}.
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EAGAIN, _EPERM, _ENOSYS = 11, 1, 38
_CLONE_THREAD = 0x00010000
#: Per architecture: (AUDIT_ARCH, {syscall: errno} refused outright, clone's number, first number of a
#: second ABI on the same architecture (x32) or None).
#: io_uring_setup, io_uring_enter and io_uring_register (425-427 on both architectures): I/O submitted through a ring is
#: performed by the kernel without a system call this filter could see.
_IO_URING = {425: _EPERM, 426: _EPERM, 427: _EPERM}
_ARCHES = {
    # clone3, fork, vfork, memfd_create, ptrace
    "x86_64": (0xC000003E, {435: _ENOSYS, 57: _EAGAIN, 58: _EAGAIN, 319: _EPERM, 101: _EPERM, **_IO_URING}, 56,
               0x40000000),
    # clone3, memfd_create, ptrace
    "aarch64": (0xC00000B7, {435: _ENOSYS, 279: _EPERM, 117: _EPERM, **_IO_URING}, 220, None),
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter(machine: str | None = None) -> bytes:
    """The compiled filter bwrap loads (``--seccomp``): refuses new processes, ``memfd_create``, ``ptrace`` and the
    ``io_uring_*`` calls (EPERM), allows the rest.

    ``clone3`` answers ENOSYS, so the C library falls back to ``clone``, whose flags a classic BPF
    filter can read: with ``CLONE_THREAD`` (a thread) it is allowed, without it (a process) refused
    with EAGAIN, as a process limit would. System calls of another ABI (i386 ``int 0x80``, x32) are
    refused.

    Raises
    ------
    SandboxUnavailable
        On an architecture without a filter here.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SandboxUnavailable(f"no process-count filter for the {machine} architecture (only {', '.join(_ARCHES)})")
    arch, refused, clone_nr, second_abi = _ARCHES[machine]
    prog = [_ins(_LD_ABS, 0, 0, 4), _ins(_JEQ, 1, 0, arch), _ins(_RET, 0, 0, _ERRNO | _ENOSYS),
            _ins(_LD_ABS, 0, 0, 0)]
    if second_abi is not None:
        prog += [_ins(_JGE, 0, 1, second_abi), _ins(_RET, 0, 0, _ERRNO | _ENOSYS)]
    for nr, errno in refused.items():
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, _ERRNO | errno)]
    # clone: allowed only with CLONE_THREAD in its flags (args[0]; its low 32 bits at offset 16).
    prog += [_ins(_JEQ, 0, 3, clone_nr), _ins(_LD_ABS, 0, 0, 16), _ins(_JSET, 1, 0, _CLONE_THREAD),
             _ins(_RET, 0, 0, _ERRNO | _EAGAIN), _ins(_RET, 0, 0, _ALLOW)]
    return b"".join(prog)
