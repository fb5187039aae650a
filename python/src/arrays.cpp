// Imports and cuts the arrays of the bindings (arrays.hpp).
#include "arrays.hpp"

#include <nanobind/stl/string.h>

#include <sstream>

namespace pmkit::python {

namespace {

std::string shape_string(const Array& a) {
  std::ostringstream os;
  os << "(";
  for (std::size_t d = 0; d < a.ndim(); ++d) os << (d ? ", " : "") << a.shape(d);
  os << (a.ndim() == 1 ? ",)" : ")");
  return os.str();
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (std::size_t d = 0; d < shape.size(); ++d) os << (d ? ", " : "") << shape[d];
  os << ")";
  return os.str();
}

std::string dtype_string(nb::dlpack::dtype t) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: break;
  }
  return kind + std::to_string(t.bits) + (t.lanes > 1 ? "x" + std::to_string(t.lanes) : "");
}

// The dtype of a __cuda_array_interface__ typestr ("<f4", "<f8", "<u4", ...).
nb::dlpack::dtype typestr_dtype(const std::string& typestr) {
  nb::dlpack::dtype t{};
  if (typestr.size() < 3) return t;
  switch (typestr[1]) {
    case 'f': t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float); break;
    case 'u': t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt); break;
    case 'i': t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int); break;
    case 'c': t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex); break;
    case 'b': t.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool); break;
    default: return t;
  }
  t.bits = static_cast<std::uint8_t>(8 * std::stoi(typestr.substr(2)));
  t.lanes = 1;
  return t;
}

// An array described by __cuda_array_interface__ (device memory of the plan's device:
// the interface does not say which), or an invalid array if `object` has none.
Array from_cuda_array_interface(nb::handle object, const std::string& name, bool writable, const Placement& where) {
  if (!nb::hasattr(object, "__cuda_array_interface__")) return Array();
  const nb::dict cai = nb::cast<nb::dict>(object.attr("__cuda_array_interface__"));
  const nb::tuple data = nb::cast<nb::tuple>(cai["data"]);
  const auto pointer = nb::cast<std::uintptr_t>(data[0]);
  if (writable && nb::cast<bool>(data[1]))
    throw nb::value_error((name + " is read-only; pmkit writes its results into it").c_str());
  const nb::dlpack::dtype dtype = typestr_dtype(nb::cast<std::string>(cai["typestr"]));
  const std::size_t itemsize = (dtype.bits + 7) / 8;
  std::vector<std::size_t> shape;
  for (nb::handle extent : nb::cast<nb::tuple>(cai["shape"])) shape.push_back(nb::cast<std::size_t>(extent));
  std::vector<std::int64_t> strides(shape.size());
  const bool has_strides = cai.contains("strides") && !cai["strides"].is_none();
  std::int64_t packed = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (has_strides) {
      const auto bytes = nb::cast<std::int64_t>(nb::cast<nb::tuple>(cai["strides"])[d]);
      if (itemsize == 0 || bytes % static_cast<std::int64_t>(itemsize) != 0)
        throw nb::value_error((name + ": a stride of " + std::to_string(bytes) +
                               " bytes is not a whole number of elements").c_str());
      strides[d] = bytes / static_cast<std::int64_t>(itemsize);
    } else {
      strides[d] = packed;
    }
    packed *= static_cast<std::int64_t>(shape[d]);
  }
  return Array(reinterpret_cast<const void*>(pointer), shape.size(), shape.data(), object, strides.data(), dtype,
               nb::device::cuda::value, where.device_id);
}

// The TypeError of an array of another dtype than the plan's.
nb::builtin_exception wrong_dtype(const std::string& name, const std::string& dtype, const char* dtype_name) {
  return nb::type_error((name + " has dtype " + dtype + "; the plan takes " + dtype_name +
                         " (convert it first: pmkit copies nothing)").c_str());
}

}  // namespace

std::string element_name(const char* what, std::size_t i, std::size_t count) {
  return count == 1 ? std::string(what) : std::string(what) + "[" + std::to_string(i) + "]";
}

Array import_array(nb::handle object, const std::string& name, nb::dlpack::dtype dtype, const char* dtype_name,
                   bool writable, const Placement& where) {
  Array array;
  bool imported = false;
  if (writable) {
    nb::ndarray<> mutable_array;
    imported = nb::try_cast(object, mutable_array, false);
    if (imported) {
      array = Array(mutable_array);
    } else if (nb::try_cast(object, array, false)) {
      throw nb::value_error((name + " is read-only; pmkit writes its results into it").c_str());
    }
  } else {
    imported = nb::try_cast(object, array, false);
  }
  if (!imported) {
    array = from_cuda_array_interface(object, name, writable, where);
    imported = array.is_valid();
  }
  // An array whose dtype neither DLPack nor the buffer protocol carries (NumPy's object
  // and string arrays): its dtype is what is wrong.
  if (!imported && nb::hasattr(object, "dtype") && nb::hasattr(object, "shape"))
    throw wrong_dtype(name, nb::cast<std::string>(object.attr("dtype").attr("__str__")()), dtype_name);
  if (!imported) {
    const std::string type = nb::cast<std::string>(nb::type_name(object.type()));
    throw nb::type_error((name + " must be an array (DLPack, the buffer protocol or __cuda_array_interface__), not " +
                          type).c_str());
  }
  if (array.dtype() != dtype) throw wrong_dtype(name, dtype_string(array.dtype()), dtype_name);
  const int type = array.device_type();
  const bool on_host = type == nb::device::cpu::value || type == nb::device::cuda_host::value;
  const bool on_device = type == nb::device::cuda::value || type == nb::device::cuda_managed::value;
  if (!where.device && !on_host)
    throw nb::value_error((name + " is not in host memory; this plan is a CPU plan (or a CUDA plan with "
                                  "host_arrays=True) and takes host arrays").c_str());
  if (where.device && !on_device)
    throw nb::value_error((name + " is not in GPU memory; this CUDA plan takes arrays on device " +
                           std::to_string(where.device_id) + " (or build it with host_arrays=True)").c_str());
  if (where.device && type == nb::device::cuda::value && array.device_id() != where.device_id)
    throw nb::value_error((name + " is on device " + std::to_string(array.device_id()) + "; this plan runs on device " +
                           std::to_string(where.device_id)).c_str());
  return array;
}

Cut cut_array(const Array& a, const std::string& name, Layout layout, const std::vector<std::int64_t>& mesh_shape) {
  Cut cut;
  const std::size_t ndim = a.ndim();
  // An array of no elements (no fields, or no particles) makes views of no elements or
  // none at all: its strides, which exporters set freely (0, say), are not read.
  const bool empty = a.size() == 0;
  auto require_positive = [&](std::size_t axis) {
    if (!empty && a.shape(axis) > 1 && a.stride(axis) <= 0)
      throw nb::value_error((name + " has stride " + std::to_string(a.stride(axis)) + " along its particle axis (" +
                             std::to_string(axis) + "); pmkit takes positive strides")
                                .c_str());
  };
  switch (layout) {
    case Layout::Particles: {
      if (ndim != 1 && ndim != 2)
        throw nb::value_error((name + " has shape " + shape_string(a) + "; it must be (N,) or (F, N)").c_str());
      const std::size_t axis = ndim - 1;
      require_positive(axis);
      cut.size = a.shape(axis);
      cut.stride = empty ? 1 : a.stride(axis);
      const std::size_t fields = ndim == 2 ? a.shape(0) : 1;
      for (std::size_t f = 0; f < fields; ++f) cut.offsets.push_back(ndim == 2 ? std::int64_t(f) * a.stride(0) : 0);
      break;
    }
    case Layout::Components: {
      if (ndim < 1 || ndim > 3)
        throw nb::value_error(
            (name + " has shape " + shape_string(a) + "; it must be (N,), (N, K) or (F, N, K)").c_str());
      const std::size_t axis = ndim == 3 ? 1 : 0;
      require_positive(axis);
      cut.size = a.shape(axis);
      cut.stride = empty ? 1 : a.stride(axis);
      const std::size_t groups = ndim == 3 ? a.shape(0) : 1;
      const std::size_t components = ndim >= 2 ? a.shape(ndim - 1) : 1;
      for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t k = 0; k < components; ++k)
          cut.offsets.push_back((ndim == 3 ? std::int64_t(g) * a.stride(0) : 0) +
                                (ndim >= 2 ? std::int64_t(k) * a.stride(ndim - 1) : 0));
      break;
    }
    case Layout::Mesh: {
      const std::size_t dims = mesh_shape.size();
      const bool stacked = ndim == dims + 1;
      bool shape_ok = ndim == dims || stacked;
      for (std::size_t d = 0; shape_ok && d < dims; ++d)
        shape_ok = std::int64_t(a.shape(ndim - dims + d)) == mesh_shape[d];
      if (!shape_ok)
        throw nb::value_error((name + " has shape " + shape_string(a) + "; the plan's meshes are " +
                               shape_string(mesh_shape) + " (C order, x last), or (F, " +
                               shape_string(mesh_shape).substr(1) + " for F fields")
                                  .c_str());
      // A field is one contiguous run: each axis's stride is the product of the extents
      // after it (axes of extent 1 take any stride).
      std::int64_t packed = 1;
      for (std::size_t d = dims; d-- > 0;) {
        const std::size_t axis = ndim - dims + d;
        if (!empty && a.shape(axis) > 1 && a.stride(axis) != packed)
          throw nb::value_error((name + " is not contiguous over its mesh axes; pmkit reads and writes each mesh "
                                        "as one contiguous array (pass a contiguous copy)")
                                    .c_str());
        packed *= std::int64_t(a.shape(axis));
      }
      cut.size = static_cast<std::size_t>(packed);
      const std::size_t fields = stacked ? a.shape(0) : 1;
      for (std::size_t f = 0; f < fields; ++f) cut.offsets.push_back(stacked ? std::int64_t(f) * a.stride(0) : 0);
      break;
    }
  }
  return cut;
}

void require_count(const char* what, std::size_t have, std::size_t want, const char* unit, const char* because) {
  if (have != want)
    throw nb::value_error((std::string(what) + " holds " + std::to_string(have) + " " + unit + ", expected " +
                           std::to_string(want) + " (" + because + ")")
                              .c_str());
}

}  // namespace pmkit::python
