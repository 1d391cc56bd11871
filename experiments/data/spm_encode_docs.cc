// Encodes a corpus text (documents each followed by a NUL byte) with Debian's
// C++ SentencePiece into llm.c shards OUTDIR/PREFIX_000000.bin, ... of
// SHARD_TOKENS tokens (the last one the rest): 256 little-endian int32 (magic
// 20240520, version 1, token count, zeros), then uint16 tokens, each document
// its ids followed by </s>.  The reference for corpus.py's Python encoder and
// shard writer: the two must give identical files.
//   spm_encode_docs MODEL TEXT OUTDIR PREFIX [SHARD_TOKENS (default 100000000)]
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

static int fail(const std::string &msg) {
  std::cerr << "spm_encode_docs: " << msg << "\n";
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) return fail("usage: spm_encode_docs MODEL TEXT OUTDIR PREFIX [SHARD_TOKENS]");
  const long long shard_tokens = argc == 6 ? std::atoll(argv[5]) : 100000000;
  if (shard_tokens < 1 || shard_tokens > INT32_MAX) return fail("SHARD_TOKENS must be in 1..2^31-1");
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(argv[1]);
  if (!status.ok()) return fail(std::string("cannot load model '") + argv[1] + "': " + status.ToString());
  if (sp.GetPieceSize() > 65536) return fail("vocabulary does not fit uint16 tokens");
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) return fail(std::string("cannot open '") + argv[2] + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() != '\0')
    return fail(std::string("'") + argv[2] + "' is not a corpus text (documents each end with a NUL byte)");
  std::vector<uint16_t> tokens;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\0', start);
    std::vector<int> ids;
    const auto st = sp.Encode(text.substr(start, end - start), &ids);
    if (!st.ok()) return fail("encoding failed: " + st.ToString());
    for (int id : ids) tokens.push_back(static_cast<uint16_t>(id));
    tokens.push_back(static_cast<uint16_t>(sp.eos_id()));
    start = end + 1;
  }
  // Full shards, then the rest (with no documents: one empty shard), as corpus.py cuts them.
  size_t done = 0;
  int index = 0;
  do {
    const size_t n = std::min<size_t>(shard_tokens, tokens.size() - done);
    char number[16];
    std::snprintf(number, sizeof number, "_%06d.bin", index++);
    const std::string name = argv[4] + std::string(number), path = std::string(argv[3]) + "/" + name;
    int32_t header[256] = {20240520, 1, static_cast<int32_t>(n)};
    FILE *out = std::fopen(path.c_str(), "wb");
    if (!out) return fail("cannot write '" + path + "'");
    // x86-64 is little-endian, as the format is.
    const bool ok = std::fwrite(header, sizeof header, 1, out) == 1 &&
                    std::fwrite(tokens.data() + done, 2, n, out) == n;
    if (std::fclose(out) != 0 || !ok) return fail("cannot write '" + path + "'");
    std::cout << name << " " << n << " tokens\n";
    done += n;
  } while (done < tokens.size());
  return 0;
}
