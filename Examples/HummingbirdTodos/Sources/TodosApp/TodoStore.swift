import Hummingbird

/// A todo item, as the JSON API reads and writes it.
public struct Todo: ResponseCodable, Equatable, Sendable {
    public var id: Int
    public var title: String
    public var done: Bool

    public init(id: Int, title: String, done: Bool = false) {
        self.id = id
        self.title = title
        self.done = done
    }
}

/// What a client sends to create a todo.
public struct NewTodo: Decodable, Sendable {
    public var title: String
}

/// The todos, in memory, in the order they were made.
actor TodoStore {
    private var todos: [Todo] = [Todo(id: 1, title: "Serve HTTP/3 from Hummingbird", done: true)]
    private var nextID = 2

    func all() -> [Todo] { todos }

    func add(title: String) -> Todo {
        let todo = Todo(id: nextID, title: title)
        nextID += 1
        todos.append(todo)
        return todo
    }

    func remove(id: Int) -> Bool {
        guard let index = todos.firstIndex(where: { $0.id == id }) else { return false }
        todos.remove(at: index)
        return true
    }
}
