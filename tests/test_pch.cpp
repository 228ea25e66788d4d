// The program that makes the tests' precompiled header (tests/CMakeLists.txt): nothing to run.
int main() { return 0; }
