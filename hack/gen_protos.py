"""Regenerate src/gpufleet/node/protos/*_pb2.py(i) from the .proto files beside them (needs grpcio-tools)."""

from __future__ import annotations

import sys

from grpc_tools import protoc

from gpufleet.node.protos import HERE, protoc_args

if __name__ == "__main__":
    sys.exit(protoc.main(protoc_args(HERE)))
