#!/usr/bin/python3
"""Renders every tests/data/chat_templates/*.jinja with Python's jinja2, the way Hugging Face transformers does,
and writes tests/data/chat_templates/expected.json: the reference that core/model/chat_template.cc must match
byte for byte (tests/unit/model/chat_template_test.cc).

The environment is transformers' `_compile_jinja_template` (utils/chat_template_utils.py):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
  jinja2.ext.loopcontrols]), a `tojson` filter that is json.dumps(ensure_ascii=False, indent=..., ...),
and `raise_exception(msg)` raising TemplateError(msg). AssistantTracker only adds the {% generation %} tag
(a pass-through when no assistant mask is asked for), so it is left out here: no fixture uses it.
Render arguments are apply_chat_template's: messages, tools=None, documents=None, add_generation_prompt, and the
special tokens (bos_token, eos_token).

Usage:
  render_chat_templates.py           rewrite expected.json
  render_chat_templates.py --check   render again and compare with the checked-in expected.json
                                     (exit 0 equal, 1 different, 77 when jinja2 >= 3.1 is not installed)
"""

import glob
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
EXPECTED = os.path.join(DATA, "expected.json")

# (bos_token, eos_token) per fixture, as the model's tokenizer_config.json has them.
TOKENS = {
    "llama2_chat": ("<s>", "</s>"),
    "llama3_instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1_instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2_instruct": ("", "<|im_end|>"),
    "qwen2_5_instruct": ("", "<|im_end|>"),
    "mistral_instruct_v0_1": ("<s>", "</s>"),
    "mistral_instruct_v0_3": ("<s>", "</s>"),
    "zephyr": ("<s>", "</s>"),
    "tinyllama_chat": ("<s>", "</s>"),
    "gemma_it": ("<bos>", "<eos>"),
    "phi3_mini": ("<s>", "<|endoftext|>"),
}
DEFAULT_TOKENS = ("<s>", "</s>")


def m(role, content):
    return {"role": role, "content": content}


# (name, messages, add_generation_prompt)
CONVERSATIONS = [
    ("system_user", [m("system", "You are a terse assistant."), m("user", "What is 2+2?")], True),
    ("user_only", [m("user", "Hello!")], True),
    ("multi_turn", [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell me a joke.")], True),
    ("system_multi_turn", [m("system", "Be kind."), m("user", "Hi"), m("assistant", "Hey."), m("user", "Bye")], True),
    ("non_ascii", [m("user", "Grüße aus Zürich — 你好, мир! 🌍 café")], True),
    ("quotes_newlines", [m("user", "  He said \"hi\"\n\tand 'bye' \\ {{ not_a_tag }} {% if %}  \n")], True),
    ("no_generation_prompt", [m("user", "Hi"), m("assistant", "Hello there.")], False),
    ("user_only_no_prompt", [m("user", "Hello!")], False),
    ("not_alternating", [m("user", "one"), m("user", "two")], True),
    ("assistant_first", [m("assistant", "I start."), m("user", "ok")], True),
    ("empty_content", [m("user", "")], True),
]


def make_env():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render_all():
    import jinja2

    env = make_env()
    cases = []
    for path in sorted(glob.glob(os.path.join(DATA, "*.jinja"))):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding="utf-8", newline="") as f:
            template = env.from_string(f.read())
        bos, eos = TOKENS.get(name, DEFAULT_TOKENS)
        for conv, messages, add_generation_prompt in CONVERSATIONS:
            case = {"template": name, "conversation": conv, "bos_token": bos, "eos_token": eos,
                    "add_generation_prompt": add_generation_prompt, "messages": messages}
            try:
                case["output"] = template.render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=add_generation_prompt,
                                                 bos_token=bos, eos_token=eos)
            except jinja2.exceptions.TemplateError as e:
                # raise_exception gives a bare TemplateError; UndefinedError and friends are subclasses whose
                # messages are jinja2's own wording, which the C++ renderer does not copy.
                case["error"] = str(e)
                case["error_kind"] = "raise_exception" if type(e) is jinja2.exceptions.TemplateError else "other"
            except Exception as e:  # TypeError and the like: a runtime type error
                case["error"] = str(e)
                case["error_kind"] = "other"
            cases.append(case)
    return {"generator": "tests/reference/render_chat_templates.py", "jinja2": jinja2.__version__, "cases": cases}


def main(argv):
    try:
        import jinja2
    except ImportError:
        print("render_chat_templates: jinja2 not installed, skipping")
        return 77
    if tuple(int(p) for p in jinja2.__version__.split(".")[:2]) < (3, 1):
        print(f"render_chat_templates: jinja2 {jinja2.__version__} < 3.1 (transformers' minimum), skipping")
        return 77
    result = render_all()
    if "--check" in argv:
        with open(EXPECTED, encoding="utf-8") as f:
            expected = json.load(f)
        got = {(c["template"], c["conversation"]): c for c in result["cases"]}
        want = {(c["template"], c["conversation"]): c for c in expected["cases"]}
        bad = 0
        for key in sorted(set(got) | set(want)):
            g, w = got.get(key), want.get(key)
            if g is None or w is None:
                print(f"FAIL {key}: {'missing from expected.json' if w is None else 'no longer rendered'}")
                bad += 1
            elif g != w:
                print(f"FAIL {key}:\n  expected {json.dumps(w, ensure_ascii=False)}\n  rendered {json.dumps(g, ensure_ascii=False)}")
                bad += 1
        print(f"render_chat_templates: {len(got)} cases, {bad} different from expected.json")
        return 1 if bad else 0
    with open(EXPECTED, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {EXPECTED}: {len(result['cases'])} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
