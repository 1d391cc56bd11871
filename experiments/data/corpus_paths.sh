# The places of the corpus, sourced by this folder's scripts once they have set
# `here` (this folder): the workspace root and data/corpus/'s folders (ignored
# by git: built, fetched or carried, never committed).
root="$(cd "$here/../.." && pwd)"
corpus="$root/data/corpus"
inputs="$corpus/inputs" # the pinned downloads (build_corpus.sh)
parts="$corpus/parts"   # the inputs cut for the GPU machine (pack_for_gpu.sh)
text="$corpus/text"     # {train,val}.txt and manifest.tsv (build_corpus.sh)
shards="$corpus/shards" # train and val encoded on the GPU machine (gpu_prepare.sh)
