"""FrostClient: a thin, blocking wrapper over the generated frost.v1 / grpc.health.v1 stubs.

Errors are not translated: a failed call raises ``grpc.RpcError``, whose ``code()`` is the
gRPC status (INVALID_ARGUMENT for bad parameters, with ``details()`` naming the field,
RESOURCE_EXHAUSTED when the server is full, UNAVAILABLE while it loads or drains, ...).
"""

import json

import grpc

from frost.v1 import generation_pb2, generation_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# SamplingParams fields generate() accepts as keyword arguments (see generation.proto).
SAMPLING_FIELDS = tuple(f.name for f in generation_pb2.SamplingParams.DESCRIPTOR.fields)
# The repeated ones take any iterable.
_REPEATED_SAMPLING_FIELDS = ("stop", "stop_token_ids")

# generate()'s spec_method names (SpecMethod in generation.proto); "server" is the unset value.
_SPEC_METHODS = {"server": generation_pb2.SPEC_METHOD_UNSPECIFIED, "off": generation_pb2.SPEC_METHOD_OFF,
                 "ngram": generation_pb2.SPEC_METHOD_NGRAM, "suffix": generation_pb2.SPEC_METHOD_SUFFIX}

# Marks "use the client's default timeout" so that timeout=None can mean "no deadline".
_DEFAULT = object()


class FrostClient:
    """A connection to one frostd.

    addr: gRPC target, "HOST:PORT".
    timeout: default deadline in seconds for every call (None: no deadline); each method
      takes a ``timeout`` keyword that overrides it for that call.
    tls: connect over TLS (implied by any of the next four).
    root_certificates: PEM bytes of the roots that verify the server (None: the system's).
    certificate_chain, private_key: PEM bytes of this client's certificate and key (mTLS).
    server_name: the name checked in the server's certificate (None: the host of addr).
    """

    def __init__(self, addr="localhost:50051", timeout=None, *, tls=False, root_certificates=None,
                 certificate_chain=None, private_key=None, server_name=None):
        self.addr = addr
        self.timeout = timeout
        if (certificate_chain is None) != (private_key is None):
            raise ValueError("certificate_chain and private_key go together (the client certificate and its key)")
        if tls or root_certificates or certificate_chain or server_name:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates, private_key=private_key,
                                                 certificate_chain=certificate_chain)
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            self._channel = grpc.secure_channel(addr, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(addr)
        self._generation = generation_pb2_grpc.GenerationStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _timeout(self, timeout):
        return self.timeout if timeout is _DEFAULT else timeout

    @staticmethod
    def build_request(prompt=None, add_bos=None, request_id=None, kv_codec=None, spec_method=None, spec_tokens=None,
                      messages=None, tools=None, tool_choice=None, parallel_tool_calls=None,
                      add_generation_prompt=None, chat_template_kwargs=None, **sampling):
        """The GenerateRequest for generate(); only the arguments given are set.

        prompt: text (str) or token ids (a sequence of int, used as given).
        messages: instead of a prompt, a chat in OpenAI's shape (a list of {"role", "content", "name",
          "tool_calls": [{"id", "type", "function": {"name", "arguments"}}], "tool_call_id"}), rendered with the
          served model's chat template as POST /v1/chat/completions renders it; tools (OpenAI's list of
          {"type": "function", "function": {"name", "description", "parameters": <a dict>}}), tool_choice
          ("auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}),
          parallel_tool_calls, add_generation_prompt and chat_template_kwargs (a dict) as in that endpoint.
          Final.tool_calls holds the calls parsed out of the output.
        spec_method: speculative decoding, "server" | "off" | "ngram" | "suffix" (None / "server": the
          server's engine.speculative.method); spec_tokens: most drafted tokens per step (0 / None: the
          server's, which caps it). Final.draft_tokens / accepted_tokens report what it did.
        sampling: SamplingParams fields by name (temperature=0, max_new_tokens=32, seed=7,
          stop=["\\n"], ...); None means unset (the server's default).
        """
        request = generation_pb2.GenerateRequest()
        if isinstance(prompt, str):
            request.text = prompt
        elif prompt is not None:
            request.token_ids.ids.extend(prompt)
        for m in messages or ():
            msg = request.messages.add(role=m["role"])
            if m.get("content") is not None:
                msg.content = m["content"]
            if m.get("name") is not None:
                msg.name = m["name"]
            if m.get("tool_call_id") is not None:
                msg.tool_call_id = m["tool_call_id"]
            for c in m.get("tool_calls") or ():
                call = msg.tool_calls.add(id=c.get("id", ""), type=c.get("type", "function"))
                call.function.name = c["function"]["name"]
                args = c["function"].get("arguments", "")
                call.function.arguments = args if isinstance(args, str) else json.dumps(args)
        for t in tools or ():
            tool = request.tools.add(type=t.get("type", "function"))
            fn = t["function"]
            tool.function.name = fn["name"]
            if fn.get("description") is not None:
                tool.function.description = fn["description"]
            if fn.get("parameters") is not None:
                tool.function.parameters = json.dumps(fn["parameters"])
            if fn.get("strict") is not None:
                tool.function.strict = fn["strict"]
        if isinstance(tool_choice, str):
            modes = {"auto": generation_pb2.TOOL_CHOICE_MODE_AUTO, "none": generation_pb2.TOOL_CHOICE_MODE_NONE,
                     "required": generation_pb2.TOOL_CHOICE_MODE_REQUIRED}
            if tool_choice not in modes:
                raise ValueError(f"tool_choice {tool_choice!r} (expected auto, none, required or a function)")
            request.tool_choice.mode = modes[tool_choice]
        elif tool_choice is not None:
            request.tool_choice.function = tool_choice["function"]["name"]
        if parallel_tool_calls is not None:
            request.parallel_tool_calls = parallel_tool_calls
        if add_generation_prompt is not None:
            request.add_generation_prompt = add_generation_prompt
        if chat_template_kwargs is not None:
            request.chat_template_kwargs = json.dumps(chat_template_kwargs)
        if add_bos is not None:
            request.add_bos = add_bos
        if request_id is not None:
            request.request_id = request_id
        if kv_codec is not None:
            request.kv.codec = kv_codec
        if spec_method is not None:
            if spec_method not in _SPEC_METHODS:
                raise ValueError(f"spec_method {spec_method!r} (expected one of {', '.join(_SPEC_METHODS)})")
            request.speculative.method = _SPEC_METHODS[spec_method]
        if spec_tokens is not None:
            request.speculative.num_tokens = spec_tokens
        for name, value in sampling.items():
            if name not in SAMPLING_FIELDS:
                raise TypeError(f"unknown sampling parameter {name!r} (expected one of {', '.join(SAMPLING_FIELDS)})")
            if value is None:
                continue
            if name in _REPEATED_SAMPLING_FIELDS:
                getattr(request.sampling, name).extend(value)
            else:
                setattr(request.sampling, name, value)
        return request

    def generate(self, prompt=None, *, add_bos=None, request_id=None, kv_codec=None, spec_method=None,
                 spec_tokens=None, timeout=_DEFAULT, **kwargs):
        """Streams one generation: an iterator of GenerateResponse messages, zero or more
        ``chunk`` messages then one ``final``. Arguments as in build_request() (messages=[...] for a chat).

        Leaving the loop early does not stop the server; call ``cancel()`` on the returned
        iterator (a grpc call object) to cancel the request.
        """
        request = self.build_request(prompt, add_bos=add_bos, request_id=request_id, kv_codec=kv_codec,
                                     spec_method=spec_method, spec_tokens=spec_tokens, **kwargs)
        return self._generation.Generate(request, timeout=self._timeout(timeout))

    def generate_text(self, prompt=None, **kwargs):
        """Runs generate() to the end; returns (completion text, Final message)."""
        parts = []
        final = None
        for response in self.generate(prompt, **kwargs):
            kind = response.WhichOneof("response")
            if kind == "chunk":
                parts.append(response.chunk.text)
            elif kind == "final":
                final = response.final
        if final is None:
            raise RuntimeError("frostd: the stream ended without a final message")
        return "".join(parts), final

    def tokenize(self, text, add_bos=None, timeout=_DEFAULT):
        """The token ids of text (BOS included unless add_bos=False)."""
        request = generation_pb2.TokenizeRequest(text=text)
        if add_bos is not None:
            request.add_bos = add_bos
        return list(self._generation.Tokenize(request, timeout=self._timeout(timeout)).token_ids)

    def model_info(self, timeout=_DEFAULT):
        """The served model's ModelInfo message (name, architecture, vocab_size, ...)."""
        return self._generation.GetModelInfo(generation_pb2.ModelInfoRequest(), timeout=self._timeout(timeout))

    def health(self, service="", timeout=_DEFAULT):
        """The serving status name of `service` ("" = the whole server; "frost.v1.Generation"
        = ready to generate): "SERVING", "NOT_SERVING", ... A service the server does not
        know raises grpc.RpcError NOT_FOUND."""
        response = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=self._timeout(timeout))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
