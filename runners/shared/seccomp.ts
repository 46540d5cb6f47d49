/**
 * The seccomp filter `system.exec` hands bubblewrap (`--seccomp FD`), built by hand as classic BPF, as
 * the Python runner's call processes build theirs (runners/python/sandbox/arium_seccomp.py, whose
 * table this one follows: keep them alike).
 *
 * Why: a program runs as a uid without capabilities, but the kernel lets any process make a user
 * namespace, in which it holds every capability: mounts, netfilter and the rest of the kernel that only
 * root reaches would be open to it. bubblewrap's `--disable-userns` needs a user namespace of the
 * sandbox's own, which system.exec (run by root, dropping to a uid of the call's with setpriv) has not.
 * So new namespaces are refused here: `unshare`, `setns`, and `clone` with a namespace flag (EPERM);
 * `clone3`, whose flags a classic filter cannot read, answers ENOSYS, and the C library falls back to
 * `clone`. Mounts, ptrace, keyrings, bpf, perf, userfaultfd, io_uring, module loading and kexec are
 * refused too, and netfilter's netlink sockets. Any other architecture (a 32-bit syscall from a 64-bit
 * process, x32) kills the process.
 *
 * Syscall numbers: Linux arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
 */

const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const RET_ALLOW = 0x7fff0000;
const EPERM = 1;
const ENOSYS = 38;

const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;

// struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian: low word first).
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const OFFSET_ARG0_LOW = 16;
const OFFSET_ARG2_LOW = 32;

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
const CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;
const AF_NETLINK = 16;
const NETLINK_NETFILTER = 12;

interface Arch {
  audit: number;
  /** Syscall numbers at or above this are x32's. */
  x32Bit: number | null;
  clone: number;
  clone3: number;
  socket: number;
  deny: Readonly<Record<string, number>>;
}

const ARCHES: Readonly<Record<string, Arch>> = {
  x64: {
    audit: 0xc000003e,
    x32Bit: 0x40000000,
    clone: 56,
    clone3: 435,
    socket: 41,
    deny: {
      unshare: 272,
      setns: 308,
      mount: 165,
      umount2: 166,
      pivot_root: 155,
      chroot: 161,
      ptrace: 101,
      process_vm_readv: 310,
      process_vm_writev: 311,
      keyctl: 250,
      add_key: 248,
      request_key: 249,
      bpf: 321,
      perf_event_open: 298,
      userfaultfd: 323,
      kexec_load: 246,
      kexec_file_load: 320,
      init_module: 175,
      finit_module: 313,
      delete_module: 176,
      open_by_handle_at: 304,
      name_to_handle_at: 303,
      io_uring_setup: 425,
      io_uring_enter: 426,
      io_uring_register: 427,
      open_tree: 428,
      move_mount: 429,
      fsopen: 430,
      fsconfig: 431,
      fsmount: 432,
      fspick: 433,
      mount_setattr: 442,
      swapon: 167,
      swapoff: 168,
      reboot: 169,
      acct: 163,
      quotactl: 179,
      lookup_dcookie: 212,
      personality: 135,
    },
  },
  arm64: {
    audit: 0xc00000b7,
    x32Bit: null,
    clone: 220,
    clone3: 435,
    socket: 198,
    deny: {
      unshare: 97,
      setns: 268,
      mount: 40,
      umount2: 39,
      pivot_root: 41,
      chroot: 51,
      ptrace: 117,
      process_vm_readv: 270,
      process_vm_writev: 271,
      keyctl: 219,
      add_key: 217,
      request_key: 218,
      bpf: 280,
      perf_event_open: 241,
      userfaultfd: 282,
      kexec_load: 104,
      kexec_file_load: 294,
      init_module: 105,
      finit_module: 273,
      delete_module: 106,
      open_by_handle_at: 265,
      name_to_handle_at: 264,
      io_uring_setup: 425,
      io_uring_enter: 426,
      io_uring_register: 427,
      open_tree: 428,
      move_mount: 429,
      fsopen: 430,
      fsconfig: 431,
      fsmount: 432,
      fspick: 433,
      mount_setattr: 442,
      swapon: 224,
      swapoff: 225,
      reboot: 142,
      acct: 89,
      quotactl: 60,
      lookup_dcookie: 18,
      personality: 92,
    },
  },
};

type Instruction = [code: number, jt: number, jf: number, k: number];
const stmt = (code: number, k: number): Instruction => [code, 0, 0, k];
const jump = (code: number, k: number, jt: number, jf: number): Instruction => [code, jt, jf, k];

/** The filter for `arch` (Node's `process.arch`) as the kernel takes it (struct sock_filter[]), or null where there is no table. */
export function execFilter(arch: string = process.arch): Buffer | null {
  const table = Object.hasOwn(ARCHES, arch) ? ARCHES[arch] : undefined;
  if (table === undefined) return null;
  const out: Instruction[] = [stmt(LD_W_ABS, OFFSET_ARCH), jump(JEQ_K, table.audit, 1, 0), stmt(RET_K, RET_KILL_PROCESS), stmt(LD_W_ABS, OFFSET_NR)];
  if (table.x32Bit !== null) out.push(jump(JGE_K, table.x32Bit, 0, 1), stmt(RET_K, RET_KILL_PROCESS));
  for (const number of Object.values(table.deny).sort((a, b) => a - b)) out.push(jump(JEQ_K, number, 0, 1), stmt(RET_K, RET_ERRNO | EPERM));
  out.push(
    jump(JEQ_K, table.socket, 0, 6), // not socket(): on to clone3, the number still loaded
    stmt(LD_W_ABS, OFFSET_ARG0_LOW), // the family
    jump(JEQ_K, AF_NETLINK, 0, 3),
    stmt(LD_W_ABS, OFFSET_ARG2_LOW), // the netlink protocol
    jump(JEQ_K, NETLINK_NETFILTER, 0, 1),
    stmt(RET_K, RET_ERRNO | EPERM),
    stmt(RET_K, RET_ALLOW),
    jump(JEQ_K, table.clone3, 0, 1),
    stmt(RET_K, RET_ERRNO | ENOSYS),
    jump(JEQ_K, table.clone, 0, 3),
    stmt(LD_W_ABS, OFFSET_ARG0_LOW),
    jump(JSET_K, CLONE_NAMESPACES, 0, 1),
    stmt(RET_K, RET_ERRNO | EPERM),
    stmt(RET_K, RET_ALLOW),
  );
  const bytes = Buffer.alloc(out.length * 8);
  out.forEach(([code, jt, jf, k], i) => {
    bytes.writeUInt16LE(code, i * 8);
    bytes.writeUInt8(jt, i * 8 + 2);
    bytes.writeUInt8(jf, i * 8 + 3);
    bytes.writeUInt32LE(k >>> 0, i * 8 + 4);
  });
  return bytes;
}
