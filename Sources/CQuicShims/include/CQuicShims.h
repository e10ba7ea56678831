// CQuicShims: callable functions for the ngtcp2 0.12 / nghttp3 0.8 entry points
// that their headers define as function-like macros (Swift cannot import those), GnuTLS's
// macro `gnutls_free`, plus the variadic log adaptor. No protocol logic lives here. The
// system calls live apart, in CQuicLinux.
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
#include <gnutls/pkcs12.h>
#include <nettle/aes.h>

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

#endif
