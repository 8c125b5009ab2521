// The compile that builds the test binaries' shared precompiled header (pagoda_test_pch in
// tests/CMakeLists.txt); the target needs a source file of its own, and this one adds no code.
