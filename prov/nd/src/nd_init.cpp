/*
 * nd_init.cpp: the provider's entry point. libfabric dlopens libnd-fi.so
 * (from FI_PROVIDER_PATH or its own libdir/libfabric) and calls fi_prov_ini,
 * the one symbol the library exports.
 */
#include "nd.h"
#include "nd_device.h"
#include "nd_params.h"

extern "C" __attribute__((visibility("default"))) struct fi_provider *fi_prov_ini(void) noexcept
{
	nd::define_params();
	nd::prepare_for_fork();
	return &nd_prov;
}
