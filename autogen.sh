#!/bin/sh
# Regenerates configure and the Makefile templates from configure.ac and Makefile.am.
set -e
cd "$(dirname "$0")"
mkdir -p config
autoreconf -fi
