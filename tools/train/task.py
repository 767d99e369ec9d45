"""The synthetic multi-document recall task of the embedded model (models/hypic-recall).

A request is k documents in random order, then a question whose answer is in one of them.
Text is bytes; the embedded tokenizer maps byte b to token b + 3 (common/util.c,
hy_tokenize_bytes), so every character here is one token.

  document  filler words with records among them, ending in ".\\n":
              "moss lake QZR417; pine BKL902; river dusk.\\n"
            a record is a key of three capital letters, then a value of three digits, ';'.
            A record may open the document (no filler before it), so answers also sit in
            a reused segment's first W tokens — the seam.
  question  "?QZR" — the answer is the value, "417", three tokens read greedily. The value
            follows its key directly, in the question as in the record, so answering is
            finding where the key's letters occurred and copying what came next.

Keys are unique within a request; values are uniform over 000..999. Nothing is learnt
about particular keys or values (each request draws its own), so a held-out request is new
by construction: the model has to find the key in the context and copy what follows it.

The held-out file (write_heldout) is the format hypic-bench quality and the model test read:

  R <k> <answer document index> <answer offset in that document, in bytes>
  D <document text, without its final newline>        (k lines)
  Q <question>
  A <answer>

Every document is stored without the newline that ends it in a request; readers add it
back. Lines never contain other newlines (the alphabet below has none).
"""

import random

WORDS = ("moss lake pine river dusk stone field cloud amber north quiet wind ember "
         "grove tide salt copper fern hollow ridge mist cedar dune frost harbor ivy "
         "meadow orchard pebble reed slate thorn vale willow brook cliff dawn glade "
         "heath inlet marsh oak pond quarry rain shore timber valley").split()
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


KEY_LEN = 3  # 17 576 keys; unique within a request


def new_key(r: random.Random, used: set) -> str:
    while True:
        k = "".join(r.choice(LETTERS) for _ in range(KEY_LEN))
        if k not in used:
            used.add(k)
            return k


def document(r: random.Random, used: set, nrec=None):
    """One document: (text ending in ".\\n", [(key, value, byte offset of the key)])."""
    nrec = nrec if nrec is not None else r.randint(2, 4)
    text, recs = "", []
    for i in range(nrec):
        # 0..2 filler words before a record: the first record opens the document
        # a third of the time
        for _ in range(r.randint(0, 2)):
            text += r.choice(WORDS) + " "
        k, v = new_key(r, used), f"{r.randrange(1000):03d}"
        recs.append((k, v, len(text)))
        text += f"{k}{v}; "
    for _ in range(r.randint(1, 2)):
        text += r.choice(WORDS) + " "
    return text.rstrip() + ".\n", recs


def question(key: str) -> str:
    return f"?{key}"


def request(r: random.Random, k: int, answer_doc=None, first_record=None):
    """k documents, the index of the one holding the answer, the answer record (key, value,
    offset), and every record of the request.

    answer_doc: which document holds the answer (default: uniform). first_record: True puts
    the asked record at the document's start (offset 0), False after it, None either."""
    used = set()
    docs = [document(r, used) for _ in range(k)]
    a = answer_doc if answer_doc is not None else r.randrange(k)
    if first_record is not None:
        # redraw the answer document until its chosen record sits where asked
        while True:
            text, recs = docs[a]
            cand = [x for x in recs if (x[2] == 0) == first_record]
            if cand:
                break
            for x in recs:
                used.discard(x[0])
            docs[a] = document(r, used)
        rec = r.choice(cand)
    else:
        rec = r.choice(docs[a][1])
    return [d[0] for d in docs], a, rec, [x for d in docs for x in d[1]]


def training_text(r: random.Random, k: int, nq: int):
    """A training sequence: k documents, then nq questions with their answers, each on its
    line. Returns (text, [(start, end) byte spans of the answers])."""
    docs, _, _, recs = request(r, k)
    text, spans = "".join(docs), []
    for key, val, _ in r.sample(recs, min(nq, len(recs))):
        text += question(key)
        spans.append((len(text), len(text) + 3))
        text += val + "\n"
    return text, spans


def write_heldout(path: str, seed: int, n: int, ks=(2, 4, 8, 16)):
    """n held-out requests: k cycling over ks, the answer's document cycling over first /
    middle / last, its record at the document's start every other request."""
    r = random.Random(seed)
    with open(path, "w", encoding="ascii") as f:
        for i in range(n):
            k = ks[i % len(ks)]
            where = (i // len(ks)) % 3
            a = 0 if where == 0 else (k - 1 if where == 2 else k // 2)
            docs, a, (key, val, off), _ = request(r, k, answer_doc=a, first_record=(i % 2 == 0))
            f.write(f"R {k} {a} {off}\n")
            for d in docs:
                f.write("D " + d[:-1] + "\n")
            f.write("Q " + question(key) + "\n")
            f.write("A " + val + "\n")


def read_heldout(path: str):
    out = []
    with open(path, encoding="ascii") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines) and lines[i]:
        _, k, a, off = lines[i].split()
        k, a, off = int(k), int(a), int(off)
        docs = [lines[i + 1 + j][2:] + "\n" for j in range(k)]
        q = lines[i + 1 + k][2:]
        ans = lines[i + 2 + k][2:]
        out.append(dict(docs=docs, answer_doc=a, offset=off, question=q, answer=ans))
        i += k + 3
    return out


def write_examples(dirname: str, held) -> dict:
    """The first held-out request with four documents as files a user can send (doc1.txt ..
    doc4.txt, question.txt): what `make run` suggests. Returns that request."""
    import os
    q = next(x for x in held if len(x["docs"]) == 4)
    os.makedirs(dirname, exist_ok=True)
    for j, d in enumerate(q["docs"]):
        with open(os.path.join(dirname, f"doc{j + 1}.txt"), "w", encoding="ascii") as f:
            f.write(d)
    with open(os.path.join(dirname, "question.txt"), "w", encoding="ascii") as f:
        f.write(q["question"])
    return q


def copy_text(r: random.Random, n: int, symbols: int = 36):
    """The warm-up task: n random symbols, '|', the same again. The symbols are the first
    `symbols` of the record alphabet (capital letters, then digits): the copy curriculum
    starts with a few and widens to all 36. Returns (text, [the span of the repeat])."""
    alphabet = (LETTERS + "0123456789")[:symbols]
    s = "".join(r.choice(alphabet) for _ in range(n))
    return s + "|" + s + "\n", [(n + 1, 2 * n + 1)]
