// Compiled into every op library: the catch-all its kernels are called through.
//
// tvm-ffi turns tvm::ffi::Error and std::exception into Python exceptions, but anything
// else a kernel throws (`throw 42;`, a library's own exception type) would unwind out of
// the C ABI and end the process in std::terminate. The guard calls the kernel inside a
// catch-all and raises a RuntimeError naming the operator and the thrown type instead.
// (tensorplay-cppjit guards its kernels the same way, but builds that guard on the user's
// machine; an installed op library brings its own, so loading it needs no compiler.)
#include <cxxabi.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

namespace {

std::string ThrownTypeName() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "an unknown type";
  int status = 0;
  char* readable = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string name = (status == 0 && readable != nullptr) ? readable : type->name();
  std::free(readable);
  return name;
}

tvm::ffi::Function Guard(tvm::ffi::Function kernel, std::string qualname) {
  return tvm::ffi::Function::FromPacked(
      [kernel, qualname](tvm::ffi::PackedArgs args, tvm::ffi::Any* ret) {
        try {
          kernel.CallPacked(args, ret);
        } catch (const tvm::ffi::Error&) {
          throw;  // TVM_FFI_THROW(Kind): already the Python exception the kernel chose
        } catch (abi::__forced_unwind&) {
          throw;  // thread cancellation must keep unwinding, or glibc aborts
        } catch (const std::exception& ex) {
          TVM_FFI_THROW(RuntimeError)
              << qualname << ": the kernel threw " << ThrownTypeName() << ": " << ex.what();
        } catch (...) {
          TVM_FFI_THROW(RuntimeError)
              << qualname << ": the kernel threw a C++ exception of type " << ThrownTypeName()
              << ", which is not a std::exception; throw with TVM_FFI_THROW(Kind) << message "
              << "to raise a Python exception";
        }
      });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensorplay_oplib_guard, Guard);
