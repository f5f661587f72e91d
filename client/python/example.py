#!/usr/bin/python3
"""Example: stream a completion from frostd with the Python client.

    PYTHONPATH=build/client/python:client/python /usr/bin/python3 client/python/example.py \
        --addr localhost:50051 "Once upon a time"
"""

import argparse
import sys

from frost_client import FrostClient


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", nargs="?", default="Once upon a time")
    parser.add_argument("--addr", default="localhost:50051")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    with FrostClient(args.addr, timeout=60) as client:
        info = client.model_info()
        print(f"[{info.name}, {info.architecture}, {info.n_params} parameters]", file=sys.stderr)
        for response in client.generate(args.prompt, max_new_tokens=args.max_new_tokens,
                                        temperature=args.temperature, seed=args.seed):
            if response.HasField("chunk"):
                print(response.chunk.text, end="", flush=True)
            else:
                final = response.final
                print()
                print(f"[{final.completion_tokens} tokens, "
                      f"{final.timings.decode_tokens_per_s:.1f} tok/s]", file=sys.stderr)


if __name__ == "__main__":
    main()
