#!/usr/bin/env python3
"""Renders snippets.txt with Python's jinja2 set up as Hugging Face transformers sets it up
for chat templates, and writes what each renders (or the error it raises) to jinja2.json.

    python3 make_jinja2.py          # rewrite jinja2.json
    python3 make_jinja2.py --check  # exit 1 if jinja2.json differs

Made with jinja2 3.1.6 on CPython 3.11. Snippets are separated by a line "=====".
"""
import json, sys
import jinja2, jinja2.ext, jinja2.sandbox

env = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
    json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

env.globals["raise_exception"] = raise_exception

VARS = {
    "s": "  Hello World  ", "n": None, "l": [3, 1, 2], "e": "", "i": 7, "f": 2.5, "t": True,
    "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}},
    "msgs": [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "<think>r</think>\n\nans"},
             {"role": "tool", "content": None}],
    "u8": "héllo wörld ✓", "words": ["b", "A", "c", "a"],
    "objs": [{"name": "x", "v": 2}, {"name": "y", "v": 1}, {"name": "z"}],
}

def main():
    snippets = [s for s in open("snippets.txt", encoding="utf-8").read().split("\n=====\n") if s.strip()]
    cases = []
    for src in snippets:
        try:
            cases.append({"src": src, "out": env.from_string(src).render(**VARS)})
        except Exception as e:  # recorded: the Go side must fail too
            cases.append({"src": src, "error": type(e).__name__ + ": " + str(e)})
    text = json.dumps({"jinja2": jinja2.__version__, "vars": VARS, "cases": cases},
                      ensure_ascii=False, indent=1) + "\n"
    if "--check" in sys.argv:
        if open("jinja2.json", encoding="utf-8").read() != text:
            print("jinja2.json differs from what jinja2 renders now")
            sys.exit(1)
        return
    open("jinja2.json", "w", encoding="utf-8").write(text)
    print(len(cases), "cases")

main()
