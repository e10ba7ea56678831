// CQuicShims: callable functions for the ngtcp2 0.12 / nghttp3 0.8 entry points
// that their headers define as function-like macros (Swift cannot import those), the
// socket calls and macros that glibc hides behind _GNU_SOURCE or macros (cmsg, recvmmsg,
// epoll_pwait2),
// plus the variadic log adaptor. No protocol logic lives here.
#ifndef C_QUIC_SHIMS_H
#define C_QUIC_SHIMS_H

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <nghttp3/nghttp3.h>
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <gnutls/abstract.h>
#include <nettle/aes.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/openat2.h>
#include <malloc.h>
#include <linux/filter.h>
#include <linux/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>

void cqs_ngtcp2_settings_default(ngtcp2_settings *settings);
void cqs_ngtcp2_transport_params_default(ngtcp2_transport_params *params);

int cqs_ngtcp2_conn_client_new(ngtcp2_conn **pconn, const ngtcp2_cid *dcid, const ngtcp2_cid *scid,
                               const ngtcp2_path *path, uint32_t client_chosen_version,
                               const ngtcp2_callbacks *callbacks, const ngtcp2_settings *settings,
                               const ngtcp2_transport_params *params, const ngtcp2_mem *mem, void *user_data);
int cqs_ngtcp2_conn_server_new(ngtcp2_conn **pconn, const ngtcp2_cid *dcid, const ngtcp2_cid *scid,
                               const ngtcp2_path *path, uint32_t client_chosen_version,
                               const ngtcp2_callbacks *callbacks, const ngtcp2_settings *settings,
                               const ngtcp2_transport_params *params, const ngtcp2_mem *mem, void *user_data);

int cqs_ngtcp2_conn_read_pkt(ngtcp2_conn *conn, const ngtcp2_path *path, const ngtcp2_pkt_info *pi,
                             const uint8_t *pkt, size_t pktlen, ngtcp2_tstamp ts);
ngtcp2_ssize cqs_ngtcp2_conn_writev_stream(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                           uint8_t *dest, size_t destlen, ngtcp2_ssize *pdatalen,
                                           uint32_t flags, int64_t stream_id, const ngtcp2_vec *datav,
                                           size_t datavcnt, ngtcp2_tstamp ts);
ngtcp2_ssize cqs_ngtcp2_conn_writev_datagram(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                             uint8_t *dest, size_t destlen, int *paccepted, uint32_t flags,
                                             uint64_t dgram_id, const ngtcp2_vec *datav, size_t datavcnt,
                                             ngtcp2_tstamp ts);
ngtcp2_ssize cqs_ngtcp2_conn_write_connection_close(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                                    uint8_t *dest, size_t destlen,
                                                    const ngtcp2_connection_close_error *ccerr, ngtcp2_tstamp ts);
void cqs_ngtcp2_conn_get_conn_stat(ngtcp2_conn *conn, ngtcp2_conn_stat *cstat);
void cqs_ngtcp2_conn_set_early_remote_transport_params(ngtcp2_conn *conn, const ngtcp2_transport_params *params);

/// Installs `cqs_ngtcp2_log_printf` as the settings' `log_printf`; each formatted line
/// reaches the Swift function `quictransport_ngtcp2_log_line(user_data, line)`.
void cqs_ngtcp2_settings_set_log_printf(ngtcp2_settings *settings);

void cqs_nghttp3_settings_default(nghttp3_settings *settings);
int cqs_nghttp3_conn_client_new(nghttp3_conn **pconn, const nghttp3_callbacks *callbacks,
                                const nghttp3_settings *settings, const nghttp3_mem *mem, void *user_data);
int cqs_nghttp3_conn_server_new(nghttp3_conn **pconn, const nghttp3_callbacks *callbacks,
                                const nghttp3_settings *settings, const nghttp3_mem *mem, void *user_data);

/// `gnutls_free` is a macro over a function-pointer variable; this is a plain function.
void cqs_gnutls_free(void *pointer);

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
