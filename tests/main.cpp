// defines: the Catch2 main of specula_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
