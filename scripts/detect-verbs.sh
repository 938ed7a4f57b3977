#!/bin/sh
# Prints 1 when rdma-core's development files are present (the verbs provider is
# built), else 0. Says which, once, on stderr so the build log shows it.
if pkg-config --exists libibverbs librdmacm 2>/dev/null; then
  echo "rdma-kv: building the verbs provider (rdma://) against rdma-core $(pkg-config --modversion libibverbs)" >&2
  echo 1
else
  echo "rdma-kv: libibverbs/librdmacm not found by pkg-config: building the shm provider only (install libibverbs-dev librdmacm-dev for rdma://)" >&2
  echo 0
fi
