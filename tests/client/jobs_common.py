"""Shared by the jobs integration test's modules (tests/client/jobs_test.py runs them): the stubs, the small
prototype configs, and helpers for RPC codes, generic method calls and specs.
"""

import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from google.protobuf import symbol_database
    from frost.v1 import admin_pb2
    from frost.v1 import generation_pb2
    from frost.v1 import prediction_pb2
    from frost.v1 import training_pb2
    from inference import open_inference_pb2 as oip
    from inference import open_inference_pb2_grpc as oip_grpc
    import frost_testlib as lib
except ImportError as e:
    print(f"jobs_test: FAIL: cannot import the stubs ({e}); needs python3-grpcio, python3-protobuf and the "
          "frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

from frost_testlib import ADMIN, USER, ADMIN_TOKEN, USER_TOKEN, Frostd

T = training_pb2
Code = grpc.StatusCode

# A small, fast prototype config (≈3 s per job on the 1500-row subset with 1 thread).
SMALL = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
         "epochs_a": "1", "epochs_b": "1"}
# Long enough to be killed in stage B (≈8 s): 2 + 8 epochs of 43 steps, a checkpoint every 5 steps.
LONG = dict(SMALL, epochs_a="2", epochs_b="8")
# For a job that must still be running when it is cancelled.
VERY_LONG = dict(SMALL, epochs_a="2", epochs_b="200")

WRONG_TOKEN = "wr0ng-T0ken-5a5a5a5a5a5a5a5a"
STAGE_RANK = {"features": 1, "stage_a": 2, "cache": 3, "stage_b": 4, "finalize": 5, "evaluate": 6, "done": 7}
PREDICT_TEXTS = ["I love this wonderful sunny day!", "The meeting was moved to Tuesday.",
                 "Everything went terribly wrong and I am furious."]


def state_name(s):
    return T.JobState.Name(s)


def rpc_code(fn, *args, **kwargs):
    """The status code of a call (OK when it returns)."""
    try:
        r = fn(*args, **kwargs)
        if hasattr(r, "__iter__") and not hasattr(r, "SerializeToString"):
            for _ in r:
                pass
        return Code.OK
    except grpc.RpcError as e:
        return e.code()


def message_class(descriptor):
    return symbol_database.Default().GetSymbol(descriptor.full_name)


def all_methods():
    """(service descriptor, method descriptor) for every method of the four frost services."""
    out = []
    for module, service in ((training_pb2, "Training"), (admin_pb2, "Admin"), (prediction_pb2, "Prediction"),
                            (generation_pb2, "Generation")):
        sd = module.DESCRIPTOR.services_by_name[service]
        for m in sd.methods:
            out.append((sd, m))
    return out


def call_method(channel, sd, m, metadata):
    """Calls sd/m with a default request; returns (code, details). Streams are read to the end."""
    req_cls, resp_cls = message_class(m.input_type), message_class(m.output_type)
    path = f"/{sd.full_name}/{m.name}"
    kw = dict(request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString)
    try:
        if m.client_streaming:
            raise AssertionError(f"{path}: client streaming is not expected")
        if m.server_streaming:
            for _ in channel.unary_stream(path, **kw)(req_cls(), metadata=metadata, timeout=60):
                pass
        else:
            channel.unary_unary(path, **kw)(req_cls(), metadata=metadata, timeout=60)
        return Code.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def rows_by_text(rows):
    out = {}
    for r in rows:
        out.setdefault(r["text"], []).append(float(r["label"]))
    return out


def prototype_spec(train_path, cfg, **kw):
    return T.PrototypeJobSpec(train_path=train_path, config=cfg, **kw)
