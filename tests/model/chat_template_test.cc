// Where a Hugging Face checkpoint keeps its chat template, and what reading
// it refuses (model/chat_template.h); the GGUF side is in gguf_test.cc,
// the rendering itself in tests/jinja/.
#include "model/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using nlohmann::json;

class ChatTemplateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat(
               "octet_chat_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  absl::StatusOr<std::optional<ChatTemplateSource>> Read() {
    return ReadCheckpointChatTemplate(dir_.string());
  }
  std::filesystem::path dir_;
};

const json kConversation = {{{"role", "user"}, {"content", "hi"}}};

TEST_F(ChatTemplateDirTest, TokenizerConfigsTemplateWithItsTokens) {
  Write("tokenizer_config.json",
        json({{"chat_template",
               "{{ bos_token }}{% for m in messages %}[{{ m.content }}]"
               "{% endfor %}{% if add_generation_prompt %}>{% endif %}"},
              {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
              {"eos_token", "</s>"}})
            .dump());
  absl::StatusOr<std::optional<ChatTemplateSource>> source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(source->has_value());
  EXPECT_EQ((*source)->eos_token, "</s>");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Compile(**source);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(kConversation, true), "<s>[hi]>");
  EXPECT_EQ(*t->Render(kConversation, false), "<s>[hi]");
}

TEST_F(ChatTemplateDirTest, ChatTemplateJinjaWinsAndNamedListsGiveDefault) {
  Write("tokenizer_config.json",
        json({{"chat_template",
               {{{"name", "tool_use"}, {"template", "tools"}},
                {{"name", "default"}, {"template", "plain"}}}}})
            .dump());
  absl::StatusOr<std::optional<ChatTemplateSource>> source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->text, "plain");
  Write("chat_template.jinja", "from the file");
  source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->text, "from the file");
  EXPECT_NE((*source)->where.find("chat_template.jinja"), std::string::npos);
}

TEST_F(ChatTemplateDirTest, NoTemplateIsNotAnError) {
  absl::StatusOr<std::optional<ChatTemplateSource>> source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_FALSE(source->has_value());
  Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_FALSE(source->has_value());
}

TEST_F(ChatTemplateDirTest, MalformedFilesAreNamed) {
  const struct {
    std::string config;
    std::string fragment;
  } cases[] = {
      {"{not json", "is not a JSON object"},
      {R"({"chat_template": 3})", "neither a string nor a list"},
      {R"({"chat_template": [{"name": "x", "template": "y"}]})",
       "no template named \"default\""},
      {R"({"chat_template": "x", "eos_token": 5})", "eos_token"},
  };
  for (const auto& c : cases) {
    Write("tokenizer_config.json", c.config);
    const absl::Status s = Read().status();
    EXPECT_NE(s.message().find(c.fragment), std::string::npos)
        << c.config << " -> " << s;
    EXPECT_NE(s.message().find("tokenizer_config.json"), std::string::npos);
  }
}

TEST_F(ChatTemplateDirTest, AnUnsupportedTemplateIsRefusedAtCompile) {
  Write("chat_template.jinja", "{% macro m() %}x{% endmacro %}");
  absl::StatusOr<std::optional<ChatTemplateSource>> source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  const absl::Status s = ChatTemplate::Compile(**source).status();
  EXPECT_NE(s.message().find("macro"), std::string::npos) << s;
  EXPECT_NE(s.message().find("chat_template.jinja"), std::string::npos) << s;
}

TEST_F(ChatTemplateDirTest, ATemplatesRaiseRefusesTheConversation) {
  Write("chat_template.jinja",
        "{% if messages[0].role != 'user' %}"
        "{{ raise_exception('the first message must be the user\\'s') }}"
        "{% endif %}ok");
  absl::StatusOr<std::optional<ChatTemplateSource>> source = Read();
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Compile(**source);
  ASSERT_TRUE(t.ok()) << t.status();
  const json system = {{{"role", "system"}, {"content", "x"}}};
  const absl::StatusOr<std::string> refused = t->Render(system, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("must be the user's"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(*t->Render(kConversation, true), "ok");
}

}  // namespace
}  // namespace octet
