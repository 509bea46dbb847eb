# src/dsl — the .weft language: lexer, parser, program builder, outputs, formatter, writer.
list(APPEND WEFT_SOURCES
  src/dsl/text.c
  src/dsl/lexer.c
  src/dsl/parser.c
  src/dsl/program.c
  src/dsl/outputs.c
  src/dsl/format.c
  src/dsl/writer.c
)
