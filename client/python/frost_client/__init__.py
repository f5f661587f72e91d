"""Python client of frostd's gRPC API (frost.v1.Generation and grpc.health.v1.Health).

    from frost_client import FrostClient
    with FrostClient("localhost:50051") as client:
        text, final = client.generate_text("Once upon a time", max_new_tokens=32, temperature=0)

Needs grpcio and protobuf (Debian: python3-grpcio, python3-protobuf) and the generated stub
packages ``frost.v1`` and ``grpc_health.v1`` that the CMake target ``frost_python_stubs``
writes to ``<build>/client/python``; put that directory on PYTHONPATH.
"""

from frost_client.client import SAMPLING_FIELDS, FrostClient

__all__ = ["FrostClient", "SAMPLING_FIELDS"]
