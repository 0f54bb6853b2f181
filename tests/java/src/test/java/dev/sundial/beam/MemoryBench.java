package dev.sundial.beam;

/**
 * JUnit category of the Java side of tools/bench_memory.sh (a benchmark, not a test of the
 * suites: it runs only when that command asks for it with -Dsundial.groups).
 */
public interface MemoryBench {}
