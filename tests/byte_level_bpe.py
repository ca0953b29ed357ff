"""The byte-level BPE tokenizers the Python tests train themselves (no downloads), with
`tokenizers`, in the forms of GPT-2, Llama 3 and Qwen2. Each returns a trained
tokenizers.Tokenizer; what a test adds beyond (a post-processor, saving it as an HF
folder) is its own."""

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def gpt2_like_bpe(texts, vocab_size):
    """GPT-2's form: ByteLevel with its own regex, the full byte alphabet, <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def llama3_like_bpe(texts, vocab_size, reserved=4, byte_level_post=True):
    """Llama 3's form: Split(its regex, isolated) + ByteLevel(use_regex=False), ignore_merges, the
    full byte alphabet; <|begin_of_text|>, <|end_of_text|> and `reserved` reserved specials added
    after training; BOS put first by a TemplateProcessing post-processor (after a
    ByteLevel(trim_offsets=False) one with byte_level_post, as HF Llama 3 folders have it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"] +
                           [f"<|reserved_special_token_{i}|>" for i in range(reserved)])
    bos = tok.token_to_id("<|begin_of_text|>")
    template = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                             special_tokens=[("<|begin_of_text|>", bos)])
    tok.post_processor = (processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
                          if byte_level_post else template)
    return tok


def qwen2_like_bpe(texts, vocab_size):
    """Qwen2's form: NFC, Split(its regex, isolated) + ByteLevel(use_regex=False), no BOS, trained
    without the full byte alphabet (bytes never seen are dropped); <|endoftext|>, <|im_start|> and
    <|im_end|> added after training."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size))
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return tok
