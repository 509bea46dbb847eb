# tests/dsl.cmake — the .weft language: lexer, parser and program builder, the writer's round
# trip (over the oracle's random programs and the examples), and the bad-input suite.
weft_add_test(test_dsl_lexer LABELS unit dsl)
weft_add_test(test_dsl_parser LABELS unit dsl)
weft_add_test(test_dsl_writer LABELS unit dsl SOURCES oracle_gen.c)
target_compile_definitions(test_dsl_writer PRIVATE
  WEFT_EXAMPLES_DIR="${CMAKE_CURRENT_LIST_DIR}/../examples"
  WEFT_FUZZ_CORPUS_DIR="${CMAKE_CURRENT_LIST_DIR}/../fuzz/corpus")
weft_add_test(test_dsl_bad LABELS unit dsl)
target_compile_definitions(test_dsl_bad PRIVATE WEFT_DSL_BAD_DIR="${CMAKE_CURRENT_LIST_DIR}/dsl_bad")
