#include <ngtcp2/ngtcp2.h>
