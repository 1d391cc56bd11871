#!/usr/bin/env bash
# Trains the corpus's tokenizer with Debian's spm_train: SentencePiece BPE,
# 32000 tokens, LLaMA's trainer settings (README.md lists them and where they
# differ), on a deterministic sample of the training split: whole documents
# chosen by a hash of their content, about SAMPLE_BYTES (default 30 MB), one
# sentence per non-empty line.  The same sample, arguments, thread count and
# file names give the same model file byte for byte (spm_train stores its
# arguments in the model), so the result is compared with the committed
# experiments/data/tokenizer/tokenizer.model; --install replaces that.
#   experiments/data/train_tokenizer.sh [--install]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/corpus_paths.sh"
train="$text/train.txt"
committed="$here/tokenizer/tokenizer.model"
install=0
case "${1:-}" in
  "") ;;
  --install) install=1 ;;
  *) echo "train_tokenizer: unknown argument '$1' (expected --install)" >&2; exit 2 ;;
esac
command -v spm_train >/dev/null || { echo "train_tokenizer: spm_train missing (Debian: sentencepiece)" >&2; exit 2; }
[ -f "$train" ] || { echo "train_tokenizer: $train missing (experiments/data/build_corpus.sh)" >&2; exit 2; }

work="$corpus/tokenizer"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
nice -n 19 python3 "$here/corpus.py" sample "$train" sample.txt "${SAMPLE_BYTES:-30000000}"
# LLaMA's settings (its tokenizer.model's trainer_spec and normalizer_spec),
# except the sample (input_sentence_size 0: all of it, already chosen above),
# the thread count and the seed, which fix the result here.
start=$(date +%s)
nice -n 19 spm_train --input=sample.txt --model_prefix=tokenizer \
  --model_type=bpe --vocab_size=32000 \
  --character_coverage=0.99995 --byte_fallback=true --split_digits=true \
  --allow_whitespace_only_pieces=true --max_sentencepiece_length=16 --max_sentence_length=4192 \
  --split_by_unicode_script=true --split_by_whitespace=true --split_by_number=true \
  --treat_whitespace_as_suffix=false --vocabulary_output_piece_score=true --hard_vocab_limit=true \
  --normalization_rule_name=identity --add_dummy_prefix=true --remove_extra_whitespaces=false \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --input_sentence_size=0 --num_threads=2 --random_seed=1 >train.log 2>&1 ||
  { tail -5 train.log >&2; echo "train_tokenizer: spm_train failed (log: $work/train.log)" >&2; exit 1; }
echo "train_tokenizer: spm_train took $(( $(date +%s) - start )) s; model $work/tokenizer.model"
sha256sum tokenizer.model
if [ "$install" = 1 ]; then
  mkdir -p "$here/tokenizer"
  cp tokenizer.model "$committed"
  echo "train_tokenizer: installed as $committed"
elif cmp -s tokenizer.model "$committed"; then
  echo "train_tokenizer: identical to the committed $committed"
else
  echo "train_tokenizer: FAIL: differs from the committed $committed" >&2
  exit 1
fi
