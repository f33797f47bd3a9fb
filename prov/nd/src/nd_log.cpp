/* nd_log.cpp: helpers shared by every object of the provider: logging,
 * error codes, wait objects. */
#include "nd.h"

#include <rdma/fi_eq.h>

#include <cerrno>
#include <cstring>

namespace nd {

void log_escaped_exception(const char *where, const char *what) noexcept
{
	ND_WARN(FI_LOG_CORE, "%s: %s; the call fails and no state was changed\n",
		where, what);
}

int fi_error_of_errno(int err, int otherwise) noexcept
{
	switch (err) {
	case 0: return 0;
	case ENOMEM: return -FI_ENOMEM;
	case EMFILE:
	case ENFILE: return -FI_EMFILE;
	case EADDRINUSE: return -FI_EADDRINUSE;
	case EADDRNOTAVAIL: return -FI_EADDRNOTAVAIL;
	case ENETUNREACH: return -FI_ENETUNREACH;
	case EHOSTUNREACH: return -FI_EHOSTUNREACH;
	case ETIMEDOUT: return -FI_ETIMEDOUT;
	case ECONNREFUSED: return -FI_ECONNREFUSED;
	case ENODEV:
	case ENXIO: return -FI_ENODEV;
	case EISCONN: return -FI_EISCONN;
	case ENOTCONN: return -FI_ENOTCONN;
	case EAGAIN: return -FI_EAGAIN;
	case EBUSY: return -FI_EBUSY;
	case EPERM:
	case EACCES: return -FI_EACCES;
	case ENOSPC: return -FI_ENOSPC;
	case EFAULT: return -FI_EFAULT;
	default: return otherwise;
	}
}

int control_wait(fi_log_subsys subsys, const char *object, int command, void *arg, int fd,
		 fi_wait_obj obj)
{
	switch (command) {
	case FI_GETWAIT:
		if (!arg) {
			FI_WARN(&nd_prov, subsys, "fi_control(%s, FI_GETWAIT): arg is NULL\n", object);
			return -FI_EINVAL;
		}
		if (fd < 0) {
			FI_WARN(&nd_prov, subsys, "fi_control(%s, FI_GETWAIT): no fd wait object\n", object);
			return -FI_ENODATA;
		}
		*static_cast<int *>(arg) = fd;
		return 0;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*static_cast<fi_wait_obj *>(arg) = obj;
		return 0;
	default:
		FI_WARN(&nd_prov, subsys, "fi_control(%s): command %d not supported\n", object, command);
		return -FI_ENOSYS;
	}
}

const char *strerror_fi(int ret) noexcept
{
	return fi_strerror(ret < 0 ? -ret : ret);
}

} // namespace nd
