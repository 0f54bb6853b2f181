package dev.sundial.beam;

/** JUnit category of Sundial's own Java regression tests (run by ctest's java_suite_ci). */
public interface SundialRegression {}
