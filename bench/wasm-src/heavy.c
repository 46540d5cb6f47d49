// The compute-heavy benchmark tool: counts the primes below {"n": N} with a sieve, then sums them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char input[256] = {0};
  fread(input, 1, sizeof input - 1, stdin);
  char *p = strstr(input, "\"n\":");
  long n = p ? strtol(p + 4, NULL, 10) : 1000000;
  if (n < 2 || n > 50000000) n = 1000000;
  unsigned char *composite = calloc((size_t)n, 1);
  long count = 0;
  unsigned long long sum = 0;
  for (long i = 2; i < n; i++) {
    if (composite[i]) continue;
    count++;
    sum += (unsigned long long)i;
    for (long j = i * 2; j < n; j += i) composite[j] = 1;
  }
  printf("{\"primes\":%ld,\"sum\":%llu}\n", count, sum);
  return 0;
}
