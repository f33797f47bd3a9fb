# fuzz.mk: the fuzz harnesses (libFuzzer, clang, ASan and UBSan), built by
# util/nd-fuzz into OUT. Every source of the provider is compiled with
# clang's coverage instrumentation into one archive, so that a harness links
# only the objects it reaches and the fuzzer sees the parsers' branches.
OUT ?= build/fuzz
CXX := clang++
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# -gline-tables-only: a crash report needs file and line, not full -g's
# variables, which cost a fifth more compile time.
CXXFLAGS := -std=c++20 -O1 -gline-tables-only -fno-omit-frame-pointer $(SAN) -MMD -MP -Wno-deprecated-enum-enum-conversion \
	-Iinclude -Iprov/nd/src -Iprov/nd/test $(shell pkg-config --cflags libfabric)
LIBS := $(shell pkg-config --libs libfabric) -libverbs -lrdmacm -lhwloc -lpthread

HARNESSES := fuzz_cm_data fuzz_frame fuzz_getinfo fuzz_addr
CORE_SRC := $(filter-out prov/nd/src/nd_init.cpp,$(wildcard prov/nd/src/*.cpp))
CORE_OBJ := $(patsubst prov/nd/src/%.cpp,$(OUT)/obj/%.o,$(CORE_SRC))

all: $(addprefix $(OUT)/,$(HARNESSES))

$(OUT)/obj/%.o: prov/nd/src/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(OUT)/obj/%.o: prov/nd/fuzz/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(OUT)/libnd_fuzz.a: $(CORE_OBJ)
	rm -f $@
	ar rcs $@ $^

$(OUT)/fuzz_%: $(OUT)/obj/fuzz_%.o $(OUT)/libnd_fuzz.a
	$(CXX) $(SAN) -fsanitize=fuzzer $< $(OUT)/libnd_fuzz.a $(LIBS) -o $@

.PHONY: all
-include $(wildcard $(OUT)/obj/*.d)
