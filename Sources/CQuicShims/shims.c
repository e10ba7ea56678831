#define _GNU_SOURCE
#include "CQuicShims.h"

#include <stdarg.h>
#include <stdio.h>

void cqs_ngtcp2_settings_default(ngtcp2_settings *settings) { ngtcp2_settings_default(settings); }

void cqs_ngtcp2_transport_params_default(ngtcp2_transport_params *params) {
    ngtcp2_transport_params_default(params);
}

int cqs_ngtcp2_conn_client_new(ngtcp2_conn **pconn, const ngtcp2_cid *dcid, const ngtcp2_cid *scid,
                               const ngtcp2_path *path, uint32_t client_chosen_version,
                               const ngtcp2_callbacks *callbacks, const ngtcp2_settings *settings,
                               const ngtcp2_transport_params *params, const ngtcp2_mem *mem, void *user_data) {
    return ngtcp2_conn_client_new(pconn, dcid, scid, path, client_chosen_version, callbacks, settings, params, mem,
                                  user_data);
}

int cqs_ngtcp2_conn_server_new(ngtcp2_conn **pconn, const ngtcp2_cid *dcid, const ngtcp2_cid *scid,
                               const ngtcp2_path *path, uint32_t client_chosen_version,
                               const ngtcp2_callbacks *callbacks, const ngtcp2_settings *settings,
                               const ngtcp2_transport_params *params, const ngtcp2_mem *mem, void *user_data) {
    return ngtcp2_conn_server_new(pconn, dcid, scid, path, client_chosen_version, callbacks, settings, params, mem,
                                  user_data);
}

int cqs_ngtcp2_conn_read_pkt(ngtcp2_conn *conn, const ngtcp2_path *path, const ngtcp2_pkt_info *pi,
                             const uint8_t *pkt, size_t pktlen, ngtcp2_tstamp ts) {
    return ngtcp2_conn_read_pkt(conn, path, pi, pkt, pktlen, ts);
}

ngtcp2_ssize cqs_ngtcp2_conn_writev_stream(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                           uint8_t *dest, size_t destlen, ngtcp2_ssize *pdatalen,
                                           uint32_t flags, int64_t stream_id, const ngtcp2_vec *datav,
                                           size_t datavcnt, ngtcp2_tstamp ts) {
    return ngtcp2_conn_writev_stream(conn, path, pi, dest, destlen, pdatalen, flags, stream_id, datav, datavcnt, ts);
}

ngtcp2_ssize cqs_ngtcp2_conn_writev_datagram(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                             uint8_t *dest, size_t destlen, int *paccepted, uint32_t flags,
                                             uint64_t dgram_id, const ngtcp2_vec *datav, size_t datavcnt,
                                             ngtcp2_tstamp ts) {
    return ngtcp2_conn_writev_datagram(conn, path, pi, dest, destlen, paccepted, flags, dgram_id, datav, datavcnt,
                                       ts);
}

ngtcp2_ssize cqs_ngtcp2_conn_write_connection_close(ngtcp2_conn *conn, ngtcp2_path *path, ngtcp2_pkt_info *pi,
                                                    uint8_t *dest, size_t destlen,
                                                    const ngtcp2_connection_close_error *ccerr, ngtcp2_tstamp ts) {
    return ngtcp2_conn_write_connection_close(conn, path, pi, dest, destlen, ccerr, ts);
}

void cqs_ngtcp2_conn_get_conn_stat(ngtcp2_conn *conn, ngtcp2_conn_stat *cstat) {
    ngtcp2_conn_get_conn_stat(conn, cstat);
}

extern void quictransport_ngtcp2_log_line(void *user_data, const char *line);

static void cqs_ngtcp2_log_printf(void *user_data, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    quictransport_ngtcp2_log_line(user_data, line);
}

void cqs_ngtcp2_settings_set_log_printf(ngtcp2_settings *settings) { settings->log_printf = cqs_ngtcp2_log_printf; }

void cqs_nghttp3_settings_default(nghttp3_settings *settings) { nghttp3_settings_default(settings); }

int cqs_nghttp3_conn_client_new(nghttp3_conn **pconn, const nghttp3_callbacks *callbacks,
                                const nghttp3_settings *settings, const nghttp3_mem *mem, void *user_data) {
    return nghttp3_conn_client_new(pconn, callbacks, settings, mem, user_data);
}

int cqs_nghttp3_conn_server_new(nghttp3_conn **pconn, const nghttp3_callbacks *callbacks,
                                const nghttp3_settings *settings, const nghttp3_mem *mem, void *user_data) {
    return nghttp3_conn_server_new(pconn, callbacks, settings, mem, user_data);
}

void cqs_gnutls_free(void *pointer) { gnutls_free(pointer); }

void cqs_ngtcp2_conn_set_early_remote_transport_params(ngtcp2_conn *conn, const ngtcp2_transport_params *params) {
    ngtcp2_conn_set_early_remote_transport_params(conn, params);
}
