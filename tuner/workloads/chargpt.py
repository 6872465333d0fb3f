"""chargpt: a character-level GPT (nanoGPT's shakespeare-char shape) on one UTF-8 text file.

Source: a user's "Performance Optimizations Guide", a performance guide for a character-level
transformer trained on ~1M characters of Shakespeare on an RTX 4080 Super 16 GB ("1M char
dataset", guide line 169; ``python train.py --dataset shakespeare``, line 307; Flash Attention in
``model.py``, lines 147-154). The guide does not give the model's shape, so the full scale is
nanoGPT's ``config/train_shakespeare_char.py``: 6 layers, 6 heads, 384 wide, context 256,
dropout 0.2, no biases, tied token embedding / lm_head, AdamW at learning rate 1e-3 with
betas (0.9, 0.99) and weight decay 0.1 on matrices only.

Vocabulary: the 256 byte values. The harness builds the model before (and independently of) the
dataset, so the vocabulary cannot come from the text; bytes of UTF-8 cover any text, and an
ASCII text such as Shakespeare is exactly one byte per character. nanoGPT's 65-character
vocabulary gives 10.65M parameters in its printout (tied lm_head, position embeddings left out);
the 256-byte vocabulary adds (256 - 65) x 384 = 73,344 embedding weights, and counting every
tensor of ``parameters()`` (tied weight once, position embeddings included) gives 10,818,432:
1.1% above the 10.7M of nanoGPT's character-level model.

For the ``cache`` and ``device`` data paths (``tuner.data``), ``sample_path`` holds each
window's bytes (``TokenWindows``: the token array) and casts and shifts them per sample or per
batch (``NextTokenPairs``).
"""

from __future__ import annotations

import codecs
import math
import mmap
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from tuner.data import SamplePath
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.settings import check_scale
from tuner.workload import Workload
from tuner.workloads._data import write_once

VOCAB_SIZE = 256
"""Token ids are byte values of the UTF-8 text."""
WEIGHT_DECAY = 0.1
"""nanoGPT's train.py default, applied to 2-D weights (matmuls, embeddings) only."""
BETAS = (0.9, 0.99)
"""nanoGPT's shakespeare-char config (beta2 = 0.99: few tokens per step)."""
DEFAULT_TEXT_BYTES = 1_000_000
"""Size of the embedded default text; the guide trains on "1M char" (line 169)."""
DEFAULT_TEXT_SEED = 1606
_READ_CHUNK_BYTES = 1 << 20


# --------------------------------------------------------------------------------------------
# Model (nanoGPT-style)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Shape of a GPT."""

    block_size: int
    """Context length T in tokens (longest sequence the position embedding covers)."""
    n_layer: int
    """Transformer blocks."""
    n_head: int
    """Attention heads; must divide n_embd."""
    n_embd: int
    """Model width C."""
    dropout: float
    """Dropout on embeddings, attention weights and residual branches."""
    vocab_size: int = VOCAB_SIZE
    """Token ids in [0, vocab_size)."""


_CONFIGS = {
    # nanoGPT config/train_shakespeare_char.py: n_layer 6, n_head 6, n_embd 384, block 256,
    # dropout 0.2.
    "full": GPTConfig(block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2),
    "tiny": GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=64, dropout=0.2),
}


def _config(scale: str) -> GPTConfig:
    """The model at ``scale`` (``tuner.settings.check_scale``: raises ValueError)."""
    return _CONFIGS[check_scale(scale)]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention`` (Flash /
    memory-efficient kernels on CUDA). ``(B, T, C) -> (B, T, C)``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}")
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """``(B, T, C) -> (B, T, 4C) -> GELU -> (B, T, C)``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block. ``(B, T, C) -> (B, T, C)``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder-only transformer: token ids ``(B, T)`` int64 -> logits ``(B, T, vocab_size)``.

    The token embedding and the output projection share one weight (as in nanoGPT).

    Raises:
        ValueError: a sequence longer than ``block_size``.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.h:
            x = block(x)  # (B, T, C)
        return self.lm_head(self.ln_f(x))  # (B, T, V)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

def check_text_file(path: Path, min_bytes: int) -> int:
    """Check that ``path`` is a UTF-8 text file of at least ``min_bytes`` bytes; return its size.

    Decodes the whole file in 1 MiB chunks (memory stays flat for large corpora).

    Raises:
        DataError: missing, a directory, empty, shorter than ``min_bytes``, unreadable, or not
            UTF-8 (the message gives the byte offset).
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"text file {path} is a directory; --data names one UTF-8 text file "
                        "for this workload")
    if not path.is_file():
        raise DataError(f"text file {path} does not exist (expected one UTF-8 text file)")
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset_bytes = 0  # bytes read before `chunk`
    chunk = b""
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_READ_CHUNK_BYTES):
                decoder.decode(chunk)
                offset_bytes += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        # exc.object is the decoder's pending bytes from earlier chunks followed by `chunk`.
        at = offset_bytes - (len(exc.object) - len(chunk)) + exc.start
        raise DataError(f"text file {path} is not UTF-8 (byte {at}: {exc.reason})") from None
    except OSError as exc:
        raise DataError(f"text file {path} cannot be read: {exc}") from None
    if offset_bytes == 0:
        raise DataError(f"text file {path} is empty (expected UTF-8 text)")
    if offset_bytes < min_bytes:
        raise DataError(f"text file {path} holds {offset_bytes} bytes; this scale needs at "
                        f"least {min_bytes} (one window of block_size + 1)")
    return offset_bytes


class CharWindows(Dataset):
    """Consecutive windows of a UTF-8 text file as next-token pairs.

    Sample ``i`` reads the ``block_size + 1`` bytes starting at byte
    ``min(i * block_size, n_bytes - block_size - 1)`` and tokenises them (byte value -> id,
    int64); it returns ``x = ids[:-1]`` and ``y = ids[1:]``, both ``(block_size,)`` int64.
    ``len`` is ``n_bytes // block_size``, so one epoch is one pass over the text.

    The file is memory-mapped lazily in each process (DataLoader workers included); pickling
    drops the map.

    Raises:
        DataError: from ``check_text_file`` at construction.
    """

    def __init__(self, path: Path, block_size: int):
        self.path = Path(path)
        self.block_size = block_size
        self.n_bytes = check_text_file(self.path, block_size + 1)
        self._map: mmap.mmap | None = None

    def __len__(self) -> int:
        return self.n_bytes // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next_token_pair(self.tokens(index))  # (T,), (T,)

    def tokens(self, index: int) -> torch.Tensor:
        """The ``block_size + 1`` bytes of sample ``index`` as uint8 ``(T + 1,)``.

        Raises:
            IndexError: ``index`` outside ``0 .. len - 1``.
            DataError: the file cannot be read.
        """
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range 0..{len(self) - 1}")
        if self._map is None:
            self._map = self._open()
        T = self.block_size
        start = min(index * T, self.n_bytes - T - 1)
        window = self._map[start:start + T + 1]  # bytes, T + 1
        return torch.from_numpy(np.frombuffer(window, dtype=np.uint8).copy())  # (T+1,)

    def _open(self) -> mmap.mmap:
        try:
            with open(self.path, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise DataError(f"text file {self.path} cannot be read: {exc}") from None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_map"] = None
        return state


def next_token_pair(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``(..., T + 1)`` (any integer dtype) -> inputs and targets, int64
    ``(..., T)`` each: ``x = ids[..., :-1]``, ``y = ids[..., 1:]``."""
    ids = tokens.long()
    return ids[..., :-1], ids[..., 1:]


class TokenWindows(Dataset):
    """The deterministic part of the sample path (``CharGPT.sample_path``): sample ``i`` of a
    ``CharWindows`` as its ``block_size + 1`` tokens, uint8 ``(T + 1,)`` (``CharWindows.tokens``):
    the same ``len`` and the same windows, so a cache of it holds the text's token array once
    (each window's last byte twice: ``len x (T + 1)`` bytes)."""

    def __init__(self, windows: CharWindows):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor]:
        return (self.windows.tokens(index),)


class NextTokenPairs:
    """The rest of the sample path: decoded tokens ``(T + 1,)`` -> ``(x, y)`` int64 ``(T,)``
    each, as ``CharWindows`` items (``next_token_pair``); on a stacked batch ``(B, T + 1)``
    -> ``(B, T)`` each, contiguous, as the default collate stacks them. Nothing in it is
    random: a ``CharWindows`` sample is a fixed window, and an epoch is every window once in
    a shuffled order (``DataLoader(shuffle=True)`` on the ``cache`` path, ``DeviceBatches``'
    permutation on the ``device`` path)."""

    def __call__(self, sample: tuple[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = next_token_pair(sample[0])
        return (x, y) if x.dim() == 1 else (x.contiguous(), y.contiguous())


_SPEAKERS = ("ROMEO", "JULIET", "GLOUCESTER", "CORIOLANUS", "MENENIUS", "KING RICHARD II",
             "QUEEN ELIZABETH", "DUKE VINCENTIO", "ISABELLA", "LUCIO", "PETRUCHIO", "KATHARINA",
             "First Citizen", "Second Servingman", "BUCKINGHAM", "NURSE")
_WORDS = tuple("""
the and to of i you my a that in is not his me it with be your for this he but have as thou so
him will what by thy all her do no shall if are we our on thee lord now from good sir come
they at would more was or let then here their how which she love upon them know there than
like may well an make say one us did should o see speak go man these can tell king out what's
yet give hath doth must such when too where why death life heart blood night day sweet fair
heaven crown grace honour soul hand eyes head word words time world father son brother noble
gentle true dear poor old young great little never ever nothing something away again before
hence thus thine mine himself myself nay ay farewell pray prithee marry unto whose while
friends foes rome england france lady queen duke prince master servant villain
""".split())


def generate_text(n_bytes: int, seed: int) -> str:
    """A deterministic play-like ASCII text of exactly ``n_bytes`` characters.

    A first-order word Markov chain over an embedded word list (each word has 6 fixed successors)
    arranged as speeches: ``SPEAKER:\\n`` + 1-4 capitalised lines of 4-11 words ending in
    punctuation, speeches separated by a blank line: the layout of tiny-shakespeare.
    """
    rng = random.Random(seed)
    successors = [[rng.randrange(len(_WORDS)) for _ in range(6)] for _ in _WORDS]
    parts: list[str] = []
    size = 0
    word = rng.randrange(len(_WORDS))
    while size < n_bytes:
        speech = [rng.choice(_SPEAKERS) + ":"]
        for _ in range(rng.randint(1, 4)):
            line = []
            for _ in range(rng.randint(4, 11)):
                word = rng.choice(successors[word])
                line.append(_WORDS[word])
            line[0] = line[0].capitalize()
            speech.append(" ".join(line) + rng.choice(",.;:!?."))
        text = "\n".join(speech) + "\n\n"
        parts.append(text)
        size += len(text)
    return "".join(parts)[:n_bytes]


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------

class CharGPT(Workload):
    """nanoGPT shakespeare-char GPT on a byte-tokenised UTF-8 text file."""

    name = "chargpt"
    description = ("character-level GPT (nanoGPT shakespeare-char: 6 layers, 6 heads, 384 wide, "
                   "context 256, ~10.8M params, byte vocab) on one UTF-8 text file")
    source = ("a user's Performance Optimizations Guide (RTX 4080 Super 16 GB); model shape "
              "from nanoGPT config/train_shakespeare_char.py")
    learning_rate = 1e-3  # nanoGPT train_shakespeare_char.py: learning_rate = 1e-3
    # first step under torch.compile, full scale, one H100 (docs/benchmarks.md)
    compile_s_hint = 14.0
    data_is_file = True
    references = {
        # "Base (no optimizations)", guide line 196.
        "baseline": Knobs(
            batch_size=256,  # "Batch Size Optimization (256 → 128)", line 23
            num_workers=2,  # "num_workers: 4 - Parallel data loading (was 2)", line 111
        ),
        # The guide's configuration, lines 23-154 and 277-285.
        "recommended": Knobs(
            batch_size=128,  # "training.batch_size: 128", lines 33 and 281
            num_workers=4,  # "num_workers: 4", line 111
            persistent_workers=True,  # line 112
            prefetch_factor=2,  # line 113
            pin_memory=True,  # line 114
            non_blocking=True,  # "non_blocking=True for GPU transfers", line 142
            compile="default",  # "training.use_compile: true", lines 55 and 282
            tf32=True,  # "TF32 Precision", lines 61-70
            fused_optimizer=True,  # "Fused AdamW Optimizer", lines 74-81
            cudnn_benchmark=True,  # "torch.backends.cudnn.benchmark = True", line 92
            amp="fp16",  # "Uses FP16 for most operations", line 99
        ),
    }

    def build_model(self, scale: str) -> nn.Module:
        return GPT(_config(scale))

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """``data_dir`` is the text file (``data_is_file``). Raises DataError (see
        ``check_text_file``)."""
        return CharWindows(Path(data_dir), _config(scale).block_size)

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath:
        """Decoded: each window's ``block_size + 1`` bytes, uint8 (``TokenWindows``: the token
        array, about the text's size in a cache); the rest: the byte -> int64 id cast and the
        shift into inputs and targets (``NextTokenPairs``). Items as ``build_dataset``'s:
        ``(x, y)`` int64 ``(T,)`` each; the ``device`` path gathers a batch's windows from the
        resident array in one ``index_select``.

        Raises:
            DataError: as ``build_dataset``.
        """
        decoded = TokenWindows(self.build_dataset(data_dir, scale))
        return SamplePath(decoded=decoded, augment=NextTokenPairs(),
                          augment_batch=NextTokenPairs())

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """Write ``cache_dir/chargpt-v1/input.txt`` once and return that file's path.

        1,000,000 bytes of play-like ASCII from ``generate_text`` (seed 1606), the same for both
        scales; the guide's real data is ~1M characters of Shakespeare (tiny-shakespeare is
        1,115,394), with the same layout and a similar character set, but a far smaller word
        list, so a model learns it faster. Throughput does not depend on the words.
        """
        _config(scale)

        def write(tmp: Path) -> None:
            text = generate_text(DEFAULT_TEXT_BYTES, DEFAULT_TEXT_SEED)
            (tmp / "input.txt").write_text(text, encoding="utf-8")

        return write_once(Path(cache_dir) / f"{self.name}-v1", write) / "input.txt"

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch  # (B, T), (B, T) int64
        logits = model(x)  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        T = _config(scale).block_size
        return {"x": [T], "y": [T]}

    def units_per_sample(self, scale: str) -> dict[str, int]:
        return {"tokens": _config(scale).block_size}

    def build_optimizer(self, params, fused: bool) -> torch.optim.Optimizer:
        """AdamW with nanoGPT's groups: weight decay 0.1 on tensors of 2 or more dimensions
        (matmul weights, embeddings), none on LayerNorm weights; betas (0.9, 0.99)."""
        params = [p for p in params if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        groups = [g for g in groups if g["params"]]
        return torch.optim.AdamW(groups, lr=self.learning_rate, betas=BETAS, fused=fused or None)


workload = CharGPT()
