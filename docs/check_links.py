#!/usr/bin/env python3
"""Checks the relative links of pmkit's Markdown documentation.

Every relative link in README.md and docs/**/*.md must name a file or folder that exists,
and every #anchor must name a heading of its target (or of the same page), as GitHub
derives anchors from headings: the heading's text lowercased, Markdown markup dropped,
every character but letters, digits, '_', '-' and spaces dropped, spaces turned into '-',
and a repeated heading numbered -1, -2, ... Links in code blocks and code spans are not
links. Exits 1 and names each bad link, file and line; exits 0 when every link resolves.

    python3 docs/check_links.py [REPOSITORY_ROOT]
"""
import os
import re
import sys
import unicodedata

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target "title") and ![alt](target); the target ends at a space or ')'.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def strip_code(line):
    """The line with its code spans blanked (their text is no link)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fenced is None:
                fenced = match.group(1)
            elif match.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in " -" or category[0] in "LMN" or category == "Pc":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(path, cache={}):
    """The anchors a Markdown file defines: its headings' slugs and its HTML anchors."""
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen = set(), {}
        for _, line in prose_lines(text):
            match = HEADING.match(line)
            if match:
                base = slug(match.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def links(text):
    """(line number, target) of every link outside code."""
    for number, line in prose_lines(text):
        prose = strip_code(line)
        for match in INLINE_LINK.finditer(prose):
            yield number, match.group(1)
        match = REFERENCE_DEFINITION.match(prose)
        if match:
            yield number, match.group(1)


def check(path, root):
    """The bad links of one Markdown file, as messages."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    where = os.path.relpath(path, root)
    for number, target in links(text):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not resolved.startswith(os.path.abspath(root) + os.sep):
            problems.append(f"{where}:{number}: {target}: points outside the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(f"{where}:{number}: {target}: no file {os.path.relpath(resolved, root)}")
            continue
        if anchor:
            if not resolved.endswith(".md") or os.path.isdir(resolved):
                problems.append(f"{where}:{number}: {target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(resolved):
                problems.append(f"{where}:{number}: {target}: no heading with anchor #{anchor} in "
                                f"{os.path.relpath(resolved, root)}")
    return problems


def documents(root):
    """README.md and every Markdown file under docs/."""
    found = [os.path.join(root, "README.md")]
    for folder, _, files in os.walk(os.path.join(root, "docs")):
        found += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".md")]
    return sorted(path for path in found if os.path.isfile(path))


def main():
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else default_root)
    problems, count = [], 0
    files = documents(root)
    for path in files:
        with open(path, encoding="utf-8") as f:
            count += sum(1 for _ in links(f.read()))
        problems += check(os.path.abspath(path), root)
    for problem in problems:
        print(problem)
    print(f"{len(files)} files, {count} links checked, {len(problems)} bad")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
