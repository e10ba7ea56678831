#include <nghttp3/nghttp3.h>
