# hf_gpt2.py — a 2-layer GPT-2 and its Trainer, on the bytes of a real text file
import argparse
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

BLOCK = 128  # tokens per sample (bytes: the vocabulary is the 256 byte values)


class ByteWindows(torch.utils.data.Dataset):
    """Every window of BLOCK bytes of a text file: argparse's own source here."""

    def __init__(self, path: Path):
        self.data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)

    def __len__(self):
        return len(self.data) - BLOCK

    def __getitem__(self, i):
        return {"input_ids": self.data[i:i + BLOCK].long()}


def collate(samples):  # the causal LM shifts the labels itself
    ids = torch.stack([s["input_ids"] for s in samples])
    return {"input_ids": ids, "labels": ids.clone()}


model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=128, vocab_size=256,
                                   n_positions=BLOCK, bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir="hf-out", per_device_train_batch_size=8,
                         learning_rate=3e-4, weight_decay=0.01, report_to="none")
trainer = Trainer(model=model, args=args, data_collator=collate,
                  train_dataset=ByteWindows(Path(argparse.__file__)))
