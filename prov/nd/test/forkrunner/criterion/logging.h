/* Criterion's logging header, for the ThreadSanitizer build: cr_log_info
 * is in criterion.h (see there why this directory exists). */
#include "criterion.h"
