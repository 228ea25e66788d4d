#pragma once

// Asserting what an error delivers: its exact type and the words its message must name.

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>

namespace ferry::testing {

/// Runs `f`, which must throw E (not a sibling ferry error, not a std exception), and checks that
/// the message contains every one of `parts`. Returns the message ("" on failure).
template <class E, class F>
std::string expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  std::string message;
  try {
    f();
    ADD_FAILURE() << "nothing was thrown; expected an error naming " << *parts.begin();
    return "";
  } catch (const E& e) {
    message = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the wrong type of error was thrown: " << e.what();
    return "";
  }
  for (const std::string_view part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "the message does not name \"" << part << "\": " << message;
  }
  return message;
}

}  // namespace ferry::testing
