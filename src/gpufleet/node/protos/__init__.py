"""The kubelet's gRPC APIs the node agent speaks: device plugin ``v1beta1`` and PodResources ``v1``.

The ``.proto`` files here are written from the published Kubernetes API (names and field numbers equal to the
kubelet's). Their Python message modules (``*_pb2.py`` and typed ``*_pb2.pyi``) are generated with
grpcio-tools (a dev dependency, pinned) by ``hack/gen_protos.py`` and committed, so a running agent needs only
``protobuf`` and ``grpcio``; ``tests/node/test_protos.py`` regenerates them and fails if anything differs.
Only messages are generated: the services are wired by hand in :mod:`gpufleet.node.grpcio_glue`, which keeps
grpcio's version check out of generated code and the service code typed.

Why generated and not descriptors built at run time: the runtime protobuf library cannot parse ``.proto``
text, so run-time descriptors would mean a second, hand-written copy of every field; generated modules keep
the ``.proto`` the single source and give mypy real message types.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_FILES = ("deviceplugin_v1beta1.proto", "podresources_v1.proto")


def protoc_args(out_dir: Path) -> list[str]:
    """grpc_tools.protoc arguments that (re)generate the message modules into ``out_dir``."""
    return ["grpc_tools.protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            *(str(HERE / name) for name in PROTO_FILES)]
