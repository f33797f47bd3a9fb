/*
 * nd_async.h: the verbs asynchronous events of the devices nd uses
 * (ibv_get_async_event): a queue pair that broke, a device that failed.
 *
 * A device's async fd belongs to librdmacm's context, which every domain on
 * that device shares, so the registry is process-wide: a device counts the
 * domains open on it, a queue pair names its owner and the owner's handler.
 * The EQs read the events, on their progress, as they read the CM channel:
 * every EQ's epoll set watches the async fd of every device in use, so
 * fi_eq_sread and a wait on FI_GETWAIT's fd wake for them. Each event is
 * copied and acknowledged before it is routed (ibv_destroy_qp waits for the
 * acknowledgement of every event of its queue pair); routing and
 * unregistering take the registry's lock, so a handler never runs for an
 * owner that has unregistered.
 *
 * Routing: an event about a queue pair (fatal, request or access error,
 * ...) goes to that queue pair's owner; IBV_EVENT_DEVICE_FATAL goes to every
 * queue pair's owner on the device; port and CQ events are logged
 * (rdma_cm reports address changes and device removal itself; a CQ overrun
 * cannot happen, since completions are reserved at fi_enable).
 */
#ifndef ND_ASYNC_H
#define ND_ASYNC_H

#include <infiniband/verbs.h>

namespace nd::async {

/* What a queue pair's owner hears: the event and the libfabric error it
 * means (positive FI_E*: FI_ECONNABORTED, or FI_ENODEV for the device). */
using Handler = void (*)(void *owner, ibv_event_type type, int error);

/* A domain opened (closed) on the device of `context`: its async fd is
 * made non-blocking and watched by every EQ while a domain uses it.
 * Returns 0 or -FI_E*. */
int device_open(ibv_context *context);
void device_close(ibv_context *context) noexcept;

/* An EQ's epoll set: it watches every device in use, now and later. */
int watch(int epoll_fd);
void unwatch(int epoll_fd) noexcept;

/* A queue pair and who hears of it; removed before it is destroyed. */
void add_qp(ibv_context *context, ibv_qp *qp, Handler handler, void *owner);
void remove_qp(ibv_qp *qp) noexcept;

/* Reads and routes every pending event of every device in use (never
 * blocks). Returns the number of events routed. */
int drain() noexcept;

/* Routes one event as drain() does, once it was read and acknowledged.
 * `qp` is the queue pair it names, if any. Public for the unit tests, which
 * feed the events a failing device produces. */
void route(ibv_context *context, ibv_event_type type, ibv_qp *qp) noexcept;

/* The libfabric error (positive FI_E*) an event means for a queue pair's
 * owner, 0 when it is not the owner's business. */
int error_of(ibv_event_type type) noexcept;

/* Whether an event names a queue pair (its element is element.qp). */
bool names_qp(ibv_event_type type) noexcept;

} // namespace nd::async

#endif /* ND_ASYNC_H */
