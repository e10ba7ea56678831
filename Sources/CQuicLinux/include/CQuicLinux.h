// CQuicLinux: the Linux system calls and macros that Swift cannot reach through Glibc:
// those glibc declares only under _GNU_SOURCE (recvmmsg, epoll_pwait2, pthread_setname_np),
// reaches only through the variadic `syscall` (openat2), or defines as macros (cmsg(3)); and
// the kernel headers the I/O layer needs (UDP GSO and GRO, socket filters, epoll, eventfd).
// Kept apart from the ngtcp2 shims, as NIO keeps CNIOLinux. No logic lives here.
#ifndef C_QUIC_LINUX_H
#define C_QUIC_LINUX_H

#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/openat2.h>
#include <malloc.h>
#include <linux/filter.h>
#include <linux/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/// openat2(2), which glibc 2.36 reaches only through the variadic `syscall`. Returns the
/// descriptor, or -1 with errno set (ENOSYS on kernels before 5.6, EPERM under some seccomp
/// filters; EXDEV when RESOLVE_BENEATH would leave `dirfd`).
int cqs_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve);

/// The control-message macros of cmsg(3), as functions.
struct cmsghdr *cqs_cmsg_firsthdr(struct msghdr *message);
struct cmsghdr *cqs_cmsg_nxthdr(struct msghdr *message, struct cmsghdr *header);
unsigned char *cqs_cmsg_data(struct cmsghdr *header);
size_t cqs_cmsg_space(size_t length);
size_t cqs_cmsg_len(size_t length);

/// epoll_pwait2(2) (nanosecond timeouts) and pthread_setname_np(3), which glibc declares only
/// under _GNU_SOURCE. `events` points to `struct epoll_event`s, `timeout` to a `struct timespec`
/// or is NULL (kept as `void *` so that this module does not own those types).
int cqs_epoll_pwait2(int epfd, void *events, int maxevents, const void *timeout);
int cqs_set_thread_name(pthread_t thread, const char *name);

/// `struct mmsghdr` and recvmmsg(2), which glibc declares only under _GNU_SOURCE; the layout is
/// the kernel's.
struct cqs_mmsghdr {
    struct msghdr msg_hdr;
    unsigned int msg_len;
};
int cqs_recvmmsg(int fd, struct cqs_mmsghdr *messages, unsigned int count, int flags);

#endif
