/* nd_log.cpp: logging helpers shared by every object of the provider. */
#include "nd.h"

#include <cstring>

namespace nd {

void log_escaped_exception(const char *where, const char *what) noexcept
{
	ND_WARN(FI_LOG_CORE, "%s: %s; the call fails and no state was changed\n",
		where, what);
}

const char *strerror_fi(int ret) noexcept
{
	return fi_strerror(ret < 0 ? -ret : ret);
}

} // namespace nd
