// demo.checksum: the CRC-32 and FNV-1a hashes of a text, as a WebAssembly tool written in C.
// Input JSON on stdin ({"text": "..."}, checked against the schema by the engine), output JSON on stdout.
// Built by build.sh into ../tools/demo-checksum.wasm; the test checks the shipped file against this source.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hex(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static size_t put_utf8(unsigned char *out, uint32_t cp) {
  if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
  if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 0x3F); return 2; }
  if (cp < 0x10000) { out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 0x3F); out[2] = 0x80 | (cp & 0x3F); return 3; }
  out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 0x3F); out[2] = 0x80 | ((cp >> 6) & 0x3F); out[3] = 0x80 | (cp & 0x3F);
  return 4;
}

// Decodes the JSON string that starts after the opening quote at `s` into `out` (UTF-8); returns its length.
static size_t json_string(const char *s, unsigned char *out) {
  size_t n = 0;
  while (*s && *s != '"') {
    if (*s != '\\') { out[n++] = (unsigned char)*s++; continue; }
    s++;
    switch (*s) {
      case 'n': out[n++] = '\n'; break;
      case 't': out[n++] = '\t'; break;
      case 'r': out[n++] = '\r'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'u': {
        uint32_t cp = 0;
        for (int i = 1; i <= 4; i++) cp = cp * 16 + (uint32_t)hex(s[i]);
        s += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && s[1] == '\\' && s[2] == 'u') {
          uint32_t lo = 0;
          for (int i = 3; i <= 6; i++) lo = lo * 16 + (uint32_t)hex(s[i]);
          if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); s += 6; }
        }
        n += put_utf8(out + n, cp);
        break;
      }
      default: out[n++] = (unsigned char)*s;
    }
    s++;
  }
  return n;
}

int main(void) {
  static char input[1 << 21];
  static unsigned char text[1 << 21];
  size_t read = fread(input, 1, sizeof input - 1, stdin);
  input[read] = 0;
  char *start = strstr(input, "\"text\":\"");
  if (!start) {
    fprintf(stderr, "expected {\"text\": \"...\"}\n");
    return 1;
  }
  size_t n = json_string(start + 8, text);

  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    crc ^= text[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xFFFFFFFFu;
  uint64_t fnv = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) fnv = (fnv ^ text[i]) * 0x100000001b3ull;

  fprintf(stderr, "hashed %zu bytes\n", n);
  printf("{\"bytes\":%zu,\"crc32\":\"%08x\",\"fnv1a64\":\"%016llx\"}\n", n, crc, (unsigned long long)fnv);
  return 0;
}
