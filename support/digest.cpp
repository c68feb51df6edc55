#include "support/digest.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <openssl/evp.h>

namespace anvil::support {

namespace {
struct MdCtxDeleter {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx new_context() {
    MdCtx ctx(EVP_MD_CTX_new());
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::runtime_error("sha256: OpenSSL init failed");
    return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx, digest.data(), &length) != 1) throw std::runtime_error("sha256: OpenSSL final failed");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(length * 2);
    for (unsigned int i = 0; i < length; ++i) {
        out += kHex[digest[i] >> 4];
        out += kHex[digest[i] & 0xf];
    }
    return out;
}
}  // namespace

std::string sha256_hex(std::string_view bytes) {
    MdCtx ctx = new_context();
    EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
    return finish(ctx.get());
}

std::string sha256_file_hex(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error(file.string() + ": cannot open for reading: " + std::strerror(errno));
    MdCtx ctx = new_context();
    std::array<char, 1 << 16> buffer{};
    while (in) {
        in.read(buffer.data(), buffer.size());
        if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
    if (in.bad()) throw std::runtime_error(file.string() + ": read error");
    return finish(ctx.get());
}

}  // namespace anvil::support
