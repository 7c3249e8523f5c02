// The guard every cpp_jit kernel is called through.
//
// tvm-ffi's exported functions turn tvm::ffi::Error and std::exception into Python
// exceptions, but anything else a kernel throws (`throw 42;`, a library's own exception
// type) unwinds out of the C ABI and ends the process in std::terminate (SIGABRT). The
// guard calls the kernel inside a catch-all, in C++ frames that can catch it, and turns
// it into a RuntimeError that names the kernel and the thrown type.
#include <cxxabi.h>

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

}  // namespace

tvm::ffi::Function guard(tvm::ffi::Function kernel, std::string qualname) {
  return tvm::ffi::Function::FromPacked(
      [kernel, qualname](tvm::ffi::PackedArgs args, tvm::ffi::Any* ret) {
        try {
          kernel.CallPacked(args, ret);
        } catch (const tvm::ffi::Error&) {
          throw;  // TVM_FFI_THROW(Kind): already the Python exception the kernel chose
        } catch (abi::__forced_unwind&) {
          throw;  // thread cancellation must keep unwinding, or glibc aborts
        } catch (const std::exception& ex) {  // only from functions exported by hand
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
