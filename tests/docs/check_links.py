#!/usr/bin/env python3
"""Checks that every local link of the docs leads somewhere (Python 3 standard library only).

    check_links.py [--book docs/book] FILE_OR_DIR...

Markdown (the files given, and every .md under the directories given, docs/book aside): every
inline link, image and reference definition that is not a URL (http:, https:, mailto:, //...)
must name an existing file or directory, relative to the file it is in; a `#anchor` must be a
heading of the target Markdown file (slugged as GitHub and mdBook do) or an `id`/`name` in it.
Links inside code blocks and code spans are not links.

HTML (with --book, the built book): every href and src of every page must name a file of the
book, and a `#anchor` an `id` of the page it points to. A link that leaves the book (the pages
link to the repository's files, e.g. ../tests/README.md) is checked against the repository
instead: the book's directory stands for docs/, and a page mdBook renamed from .md to .html
counts if its .md exists.

Prints every broken link as FILE: LINK: why, and exits 1 if there is any.
"""

import argparse
import html.parser
import os
import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ATTR = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.I)
HTML_ID = re.compile(r"""<[a-z][^>]*?\b(?:id|name)\s*=\s*["']([^"']*)["']""", re.I)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s]+)\s*\}\}")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def show(path):
    """A path as the report names it: relative to the repository (or to where it is)."""
    return os.path.relpath(path, ROOT)


def external(link):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link)) or link.startswith("//")


def slug(text):
    """A heading's anchor as GitHub and mdBook make it."""
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.replace("`", "")
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
        elif unicodedata.category(ch).startswith("L"):
            out.append(ch)
    return "".join(out)


def prose_lines(text, raw=False):
    """(line number, line) of the text outside fenced code blocks, code spans blanked (unless
    raw: a heading's code spans are part of its anchor)."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line if raw else CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def expand_includes(path, text, depth=0):
    if depth > 4:
        return text

    def repl(m):
        inc = (path.parent / m.group(1)).resolve()
        try:
            return expand_includes(inc, inc.read_text(encoding="utf-8"), depth + 1)
        except OSError:
            return m.group(0)

    return INCLUDE.sub(repl, text)


_anchor_cache = {}


def md_anchors(path):
    if path not in _anchor_cache:
        text = expand_includes(path, path.read_text(encoding="utf-8"))
        anchors, seen = set(), {}
        for _, line in prose_lines(text, raw=True):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                k = seen.get(base, 0)
                seen[base] = k + 1
                anchors.add(base if k == 0 else f"{base}-{k}")
            anchors.update(HTML_ID.findall(line))
        _anchor_cache[path] = anchors
    return _anchor_cache[path]


def check_markdown(path, problems):
    text = path.read_text(encoding="utf-8")
    for n, line in prose_lines(text):
        links = INLINE.findall(line) + HTML_ATTR.findall(line)
        m = REFDEF.match(line)
        if m:
            links.append(m.group(1))
        for link in links:
            if not link or external(link):
                continue
            where = f"{show(path)}:{n}"
            target, _, anchor = link.partition("#")
            dest = (path.parent / unquote(target)).resolve() if target else path
            if not dest.exists():
                problems.append(f"{where}: {link}: no such file {show(dest)}")
                continue
            if anchor and dest.is_file() and dest.suffix == ".md":
                if unquote(anchor) not in md_anchors(dest):
                    problems.append(f"{where}: {link}: no heading or id #{anchor} in {show(dest)}")


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)
            if k in ("href", "src") and v is not None and tag in ("a", "img", "link", "script", "iframe"):
                self.links.append((self.getpos()[0], v))


def parse_page(path, cache):
    if path not in cache:
        p = Page()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = p
    return cache[path]


def check_book(book, problems):
    book = book.resolve()
    pages = {}
    for page in sorted(book.rglob("*.html")):
        if page.name == "404.html":  # links there are relative to the site's root URL
            continue
        for n, link in parse_page(page, pages).links:
            if not link or external(link) or link.startswith("javascript:"):
                continue
            where = f"{page.relative_to(book.parent)}:{n}"
            parts = urlsplit(link)
            target, anchor = unquote(parts.path), unquote(parts.fragment)
            dest = Path(os.path.normpath(page.parent / target)) if target else page
            if dest.is_dir():
                dest = dest / "index.html"
            try:
                dest.relative_to(book)
            except ValueError:  # leaves the book: a file of the repository, docs/ standing for the book
                repo = Path(os.path.normpath(DOCS / os.path.relpath(dest, book)))
                md = repo.with_suffix(".md") if repo.suffix == ".html" else None
                if not (repo.exists() or (md and md.exists())):
                    problems.append(f"{where}: {link}: leaves the book, and no {show(repo)} in the repository")
                continue
            if not dest.exists():
                problems.append(f"{where}: {link}: no such file {dest.relative_to(book.parent)}")
                continue
            if anchor and dest.suffix == ".html" and anchor not in parse_page(dest, pages).ids:
                problems.append(f"{where}: {link}: no id #{anchor} in {dest.relative_to(book.parent)}")
    return len(pages)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--book", type=Path, help="the built book's directory (its HTML is checked too)")
    ap.add_argument("paths", nargs="+", type=Path, help="Markdown files, or directories to search for them")
    args = ap.parse_args()
    book = args.book.resolve() if args.book else None
    files = []
    for p in args.paths:
        p = p.resolve()
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.md")) if not (book and book in f.parents)]
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: {p}: no such file or directory", file=sys.stderr)
            return 2
    problems = []
    for f in files:
        check_markdown(f, problems)
    pages = check_book(book, problems) if book else 0
    for p in problems:
        print(p)
    summary = f"{len(files)} Markdown files" + (f", {pages} HTML pages" if book else "")
    if problems:
        print(f"error: {len(problems)} broken links in {summary}", file=sys.stderr)
        return 1
    print(f"links ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
