#!/usr/bin/env python3
"""Counts the public API items of a crate from rustdoc JSON: every module,
struct, enum, trait, function, type alias, constant, static and macro
reachable from the crate root through public modules and re-exports, plus
their public fields, enum variants, inherent methods/associated items and
trait items; a re-export of another crate's item counts as one. Trait impls (derives, From, Stream...) are not counted.
Usage: count_api.py target/doc/flume_client.json [-v]"""
import json, sys
doc = json.load(open(sys.argv[1]))
idx = doc["index"]
seen, counted = set(), []
def kind(it):
    return next(iter(it["inner"])) if isinstance(it["inner"], dict) else it["inner"]
def visit(i, path):
    i = str(i)
    if i in seen or i not in idx:
        return
    seen.add(i)
    it = idx[i]
    k = kind(it); inner = it["inner"][k]
    name = it.get("name") or ""
    p = path + "::" + name if name else path
    if k == "use":
        if inner.get("id") is not None:
            seen.discard(i)
            tgt = str(inner["id"])
            if tgt not in idx:
                counted.append(("extern_reexport", path + "::" + inner["name"]))
                return
            if tgt in idx and tgt not in seen:
                # a re-export: count the target under the re-exported name
                if inner.get("is_glob"):
                    visit(tgt, path)
                else:
                    visit(tgt, path)
        return
    if k == "impl":
        if inner.get("trait") is None:
            for c in inner["items"]:
                visit(c, path)
        return
    if it.get("visibility") not in ("public", "default", None) and k not in ("variant",):
        return
    counted.append((k, p))
    if k == "module":
        for c in inner["items"]:
            visit(c, p)
    elif k == "struct":
        kd = inner["kind"]
        if isinstance(kd, dict):
            if "plain" in kd:
                for f in kd["plain"]["fields"]:
                    visit(f, p)
            elif "tuple" in kd:
                for f in kd["tuple"]:
                    if f is not None:
                        visit(f, p)
        for c in inner.get("impls", []):
            visit(c, p)
    elif k == "enum":
        for v in inner["variants"]:
            visit(v, p)
        for c in inner.get("impls", []):
            visit(c, p)
    elif k == "variant":
        kd = inner["kind"]
        if isinstance(kd, dict) and "struct" in kd:
            for f in kd["struct"]["fields"]:
                visit(f, p)
    elif k == "trait":
        for c in inner["items"]:
            visit(c, p)
root = str(doc["root"])
visit(root, "")
if "-v" in sys.argv:
    for k, p in sorted(counted, key=lambda x: x[1]):
        print(f"{k:10} {p}")
from collections import Counter
print(len(counted), dict(Counter(k for k, _ in counted)))
