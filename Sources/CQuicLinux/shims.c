#define _GNU_SOURCE
#include "CQuicLinux.h"

#include <linux/openat2.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

int cqs_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve) {
    struct open_how how = {.flags = flags, .mode = 0, .resolve = resolve};
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

struct cmsghdr *cqs_cmsg_firsthdr(struct msghdr *message) { return CMSG_FIRSTHDR(message); }
struct cmsghdr *cqs_cmsg_nxthdr(struct msghdr *message, struct cmsghdr *header) { return CMSG_NXTHDR(message, header); }
unsigned char *cqs_cmsg_data(struct cmsghdr *header) { return CMSG_DATA(header); }
size_t cqs_cmsg_space(size_t length) { return CMSG_SPACE(length); }
size_t cqs_cmsg_len(size_t length) { return CMSG_LEN(length); }

int cqs_epoll_pwait2(int epfd, void *events, int maxevents, const void *timeout) {
    return epoll_pwait2(epfd, events, maxevents, timeout, NULL);
}

int cqs_set_thread_name(pthread_t thread, const char *name) { return pthread_setname_np(thread, name); }

_Static_assert(sizeof(struct cqs_mmsghdr) == sizeof(struct mmsghdr), "struct mmsghdr layout");
int cqs_recvmmsg(int fd, struct cqs_mmsghdr *messages, unsigned int count, int flags) {
    return recvmmsg(fd, (struct mmsghdr *)messages, count, flags, NULL);
}
